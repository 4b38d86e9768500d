//! Node cache keys: a versioned SHA-256 digest of everything that decides a
//! node's result.

use serde_json::Value;
use std::fmt;

use crate::aegis::CacheKeySpec;
use crate::canon::Canon;
use crate::graph::{NodeSpec, TemplateError};
use crate::id::NodeId;
use crate::state::{Battlefield, FieldName};

/// The key scheme's version, the first segment of every [`CacheKey`].
///
/// Bumped whenever the encoding below changes, so entries written under an
/// older scheme can never be read under a newer one.
pub const CACHE_KEY_VERSION: &str = "v2";

/// How many hex digits of a digest the scoping segments of a key keep. They
/// only scope invalidation; uniqueness rests on the full digest.
const SCOPE_HEX: usize = 16;

/// The key one node activation's result is cached under.
///
/// Its text is `v2:{graph}:{node}:{digest}`: `graph` and `node` are short
/// digests of the graph fingerprint and of the node id within it (so
/// [`NodeCache::invalidate_prefix`](super::NodeCache::invalidate_prefix) with
/// [`CacheKey::graph_prefix`] or [`CacheKey::node_prefix`] drops one graph's
/// or one node's entries), and `digest` is the full SHA-256 of every key
/// component. Only hex digits, `v` and `:` ever appear, so a key is safe in a
/// Redis key and in a `SCAN MATCH` pattern.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix every key of the graph with this fingerprint starts with.
    pub fn graph_prefix(graph_fingerprint: &str) -> String {
        format!("{CACHE_KEY_VERSION}:{}:", graph_scope(graph_fingerprint))
    }

    /// The prefix every key of `node_id` in the graph with this fingerprint
    /// starts with.
    pub fn node_prefix(graph_fingerprint: &str, node_id: &NodeId) -> String {
        format!(
            "{CACHE_KEY_VERSION}:{}:{}:",
            graph_scope(graph_fingerprint),
            node_scope(graph_fingerprint, node_id)
        )
    }

    /// A key from its text, as an entry records it (and as tests plant it).
    pub(crate) fn from_raw(raw: impl Into<String>) -> Self {
        CacheKey(raw.into())
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", self.0)
    }
}

/// Why no key could be derived for an activation.
///
/// The engine treats it as a miss that is not stored: the node runs (and
/// reports its own input problem) exactly as it would uncached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheKeyError {
    /// A Paladin node's input template does not render from the snapshot.
    #[error("no cache key for node `{node}`: its input does not render: {source}")]
    InputNotRendered {
        /// The node.
        node: NodeId,
        /// The template's error.
        source: TemplateError,
    },
    /// The node's kind cannot be cached (validation rejects such policies).
    #[error("node `{node}` is a {kind} node, which cannot be cached")]
    UnsupportedNodeKind {
        /// The node.
        node: NodeId,
        /// Its kind.
        kind: crate::graph::NodeKind,
    },
}

fn graph_scope(graph_fingerprint: &str) -> String {
    let mut h = Canon::new("aegis-node-cache/graph-scope");
    h.str(graph_fingerprint);
    let mut s = h.hex();
    s.truncate(SCOPE_HEX);
    s
}

fn node_scope(graph_fingerprint: &str, node_id: &NodeId) -> String {
    let mut h = Canon::new("aegis-node-cache/node-scope");
    h.str(graph_fingerprint).str(node_id.as_str());
    let mut s = h.hex();
    s.truncate(SCOPE_HEX);
    s
}

/// Derives the cache key of one activation of `node_id`.
///
/// The digest covers, in a canonical length-prefixed encoding: the key
/// version, the graph fingerprint, the node id, the node's input and, when
/// the activation is a mustered task, its `task_key` and payload. The input
/// is:
///
/// - for a Paladin node, its rendered [`InputMapping`](crate::InputMapping)
///   and [`Paladin::config_fingerprint`](crate::Paladin::config_fingerprint)
///   (model, system prompt, temperature, max_loops, stop words, tools), plus,
///   under [`CacheKeySpec::Fields`], the named fields' values;
/// - for a Function node, the whole snapshot under [`CacheKeySpec::Default`],
///   or only the named fields' values under [`CacheKeySpec::Fields`].
///
/// A named field that is not set is encoded as absent, distinct from `null`.
/// The same field set named in any order, or repeated, gives the same key.
///
/// ```
/// use aegis_runtime::*;
/// use serde_json::json;
///
/// let question = FieldName::new("question")?;
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     question.clone(), DispatchRule::LastWrite, None, false,
/// )]);
/// let spec = NodeSpec::paladin(
///     Paladin::new("Answerer").with_model("gpt-4o"),
///     InputMapping::new("Answer: {question}"),
///     FieldName::new("answer")?,
/// );
/// let state = initial_state(&schema, &json!({"question": "why?"}))?;
/// let key = |state: &Battlefield| {
///     derive_key("v6:graph", &NodeId::new("answerer"), &spec,
///                &CacheKeySpec::Fields(vec![question.clone()]), state, None)
/// };
/// assert_eq!(key(&state)?, key(&state)?);
/// let other = initial_state(&schema, &json!({"question": "how?"}))?;
/// assert_ne!(key(&state)?, key(&other)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(hidden)]
pub fn derive_key(
    graph_fingerprint: &str,
    node_id: &NodeId,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    state: &Battlefield,
    task: Option<(&str, &Value)>,
) -> Result<CacheKey, CacheKeyError> {
    let mut h = Canon::new("aegis-node-cache/key");
    h.str(CACHE_KEY_VERSION)
        .str(graph_fingerprint)
        .str(node_id.as_str());

    match spec {
        NodeSpec::Battalion { .. } | NodeSpec::Gate { .. } => {
            return Err(CacheKeyError::UnsupportedNodeKind {
                node: node_id.clone(),
                kind: spec.kind(),
            });
        }
        NodeSpec::Paladin { paladin, input, .. } => {
            let rendered = input.render_task(state, task).map_err(|source| {
                CacheKeyError::InputNotRendered {
                    node: node_id.clone(),
                    source,
                }
            })?;
            h.str("paladin")
                .str(&paladin.config_fingerprint())
                .str(&rendered);
            match key {
                CacheKeySpec::Default => {
                    h.str("default");
                }
                CacheKeySpec::Fields(fields) => {
                    h.str("fields");
                    hash_fields(&mut h, fields, state);
                }
            }
        }
        NodeSpec::Function(_) => {
            h.str("function");
            match key {
                CacheKeySpec::Default => {
                    // Field by field in name order: the canonical encoding of
                    // `Battlefield::to_json()` without materialising it.
                    h.str("snapshot");
                    let names: Vec<&FieldName> = state.field_names().collect();
                    h.count(names.len());
                    for name in names {
                        h.str(name.as_str());
                        match state.get(name.as_str()) {
                            Some(v) => h.json(v),
                            None => h.absent(),
                        };
                    }
                }
                CacheKeySpec::Fields(fields) => {
                    h.str("fields");
                    hash_fields(&mut h, fields, state);
                }
            }
        }
    }

    match task {
        None => {
            h.str("no-task");
        }
        Some((task_key, payload)) => {
            h.str("task").str(task_key).json(payload);
        }
    }

    Ok(CacheKey(format!(
        "{}{}",
        CacheKey::node_prefix(graph_fingerprint, node_id),
        h.hex()
    )))
}

fn hash_fields(h: &mut Canon, fields: &[FieldName], state: &Battlefield) {
    let mut names: Vec<&str> = fields.iter().map(FieldName::as_str).collect();
    names.sort_unstable();
    names.dedup();
    h.count(names.len());
    for name in names {
        h.str(name);
        match state.get(name) {
            Some(v) => h.json(v),
            None => h.absent(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StateNodeError;
    use crate::graph::NodeContext;
    use crate::graph::Paladin;
    use crate::graph::{Directive, InputMapping, StateNode};
    use crate::state::{BattlefieldSchema, DispatchRule, FieldSpec, initial_state};
    use serde_json::json;

    struct Noop;
    #[async_trait::async_trait]
    impl StateNode for Noop {
        fn kind_name(&self) -> &str {
            "noop"
        }

        async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
            Ok(Directive::edges(crate::state::StateDelta::new()))
        }
    }

    fn f(name: &str) -> FieldName {
        FieldName::new(name).unwrap()
    }

    fn state(input: Value) -> Battlefield {
        let schema = BattlefieldSchema::new(
            ["question", "context", "other", "log"]
                .iter()
                .map(|n| {
                    let rule = if *n == "log" {
                        DispatchRule::Append
                    } else {
                        DispatchRule::LastWrite
                    };
                    FieldSpec::new(f(n), rule, None, false)
                })
                .collect(),
        );
        initial_state(&schema, &input).unwrap()
    }

    fn paladin_spec(template: &str, model: &str) -> NodeSpec {
        NodeSpec::paladin(
            Paladin::new("Answerer").with_model(model),
            InputMapping::new(template),
            f("answer"),
        )
    }

    fn function_spec() -> NodeSpec {
        NodeSpec::function(Noop)
    }

    const FP: &str = "v6:graph-a";

    fn base() -> Battlefield {
        state(json!({"question": "why?", "context": "ctx", "other": 1}))
    }

    fn pkey(spec: &NodeSpec, key: &CacheKeySpec, st: &Battlefield) -> CacheKey {
        derive_key(FP, &NodeId::new("answerer"), spec, key, st, None).unwrap()
    }

    #[test]
    fn equal_inputs_give_equal_keys() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let a = pkey(&spec, &CacheKeySpec::Default, &base());
        let b = pkey(
            &paladin_spec("Answer: {question}", "m1"),
            &CacheKeySpec::Default,
            &base(),
        );
        assert_eq!(a, b);
        let func = function_spec();
        assert_eq!(
            pkey(&func, &CacheKeySpec::Default, &base()),
            pkey(&func, &CacheKeySpec::Default, &base())
        );
        assert!(a.as_str().starts_with("v2:"));
        assert_eq!(a.as_str().len(), "v2:".len() + 16 + 1 + 16 + 1 + 64);
    }

    #[test]
    fn changing_the_prompt_template_changes_the_key() {
        assert_ne!(
            pkey(
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
            pkey(
                &paladin_spec("Answer briefly: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
        );
    }

    #[test]
    fn changing_the_model_changes_the_key() {
        assert_ne!(
            pkey(
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
            pkey(
                &paladin_spec("Answer: {question}", "m2"),
                &CacheKeySpec::Default,
                &base()
            ),
        );
    }

    #[test]
    fn changing_any_other_paladin_setting_changes_the_key() {
        let variants = [
            Paladin::new("A").with_model("m1"),
            Paladin::new("A")
                .with_model("m1")
                .with_system_prompt("be terse"),
            Paladin::new("A").with_model("m1").with_temperature(0.2),
            Paladin::new("A").with_model("m1").with_max_loops(3),
            Paladin::new("A").with_model("m1").with_stop_word("END"),
        ];
        let keys: std::collections::BTreeSet<CacheKey> = variants
            .into_iter()
            .map(|p| {
                let spec = NodeSpec::paladin(p, InputMapping::new("Q: {question}"), f("answer"));
                pkey(&spec, &CacheKeySpec::Default, &base())
            })
            .collect();
        assert_eq!(keys.len(), 5);
    }

    #[test]
    fn changing_the_graph_fingerprint_changes_the_key_and_its_scope() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let node = NodeId::new("answerer");
        let a = derive_key(
            "v6:graph-a",
            &node,
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        let b = derive_key(
            "v6:graph-b",
            &node,
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        assert_ne!(a, b);
        // No cross-graph collision: not even the graph scope is shared, so
        // invalidating one graph never touches the other's entries.
        assert!(
            a.as_str()
                .starts_with(&CacheKey::graph_prefix("v6:graph-a"))
        );
        assert!(
            !b.as_str()
                .starts_with(&CacheKey::graph_prefix("v6:graph-a"))
        );
    }

    #[test]
    fn changing_the_node_id_changes_the_key() {
        let spec = function_spec();
        let a = derive_key(
            FP,
            &NodeId::new("a"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        let b = derive_key(
            FP,
            &NodeId::new("b"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        assert_ne!(a, b);
        assert!(
            a.as_str()
                .starts_with(&CacheKey::node_prefix(FP, &NodeId::new("a")))
        );
        assert!(
            !b.as_str()
                .starts_with(&CacheKey::node_prefix(FP, &NodeId::new("a")))
        );
    }

    #[test]
    fn changing_a_rendered_input_value_changes_a_paladin_key() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let other = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &other)
        );
        // A field the template does not render leaves the Default key alone ...
        let unrelated = state(json!({"question": "why?", "context": "ctx", "other": 2}));
        assert_eq!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &unrelated)
        );
    }

    #[test]
    fn fields_add_to_a_paladin_key() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let fields = CacheKeySpec::Fields(vec![f("context")]);
        let changed = state(json!({"question": "why?", "context": "new", "other": 1}));
        // ... but the named field does, on top of the rendered input.
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &changed)
        );
        let question_changed = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &question_changed)
        );
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &CacheKeySpec::Default, &base())
        );
    }

    #[test]
    fn a_function_default_key_covers_the_whole_snapshot() {
        let spec = function_spec();
        let changed = state(json!({"question": "why?", "context": "ctx", "other": 2}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &changed)
        );
        let appended = state(json!({"question": "why?", "context": "ctx", "other": 1, "log": [1]}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &appended)
        );
    }

    #[test]
    fn function_fields_narrow_the_key() {
        let spec = function_spec();
        let fields = CacheKeySpec::Fields(vec![f("question")]);
        let other_changed = state(json!({"question": "why?", "context": "x", "other": 9}));
        assert_eq!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &other_changed)
        );
        let question_changed = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &question_changed)
        );
    }

    #[test]
    fn field_order_and_repeats_do_not_matter_but_absence_does() {
        let spec = function_spec();
        let ab = CacheKeySpec::Fields(vec![f("question"), f("context")]);
        let ba = CacheKeySpec::Fields(vec![f("context"), f("question"), f("context")]);
        assert_eq!(pkey(&spec, &ab, &base()), pkey(&spec, &ba, &base()));

        let unset = state(json!({"question": "why?"}));
        let null = state(json!({"question": "why?", "context": null}));
        assert_ne!(pkey(&spec, &ab, &unset), pkey(&spec, &ab, &null));
    }

    #[test]
    fn the_task_changes_the_key() {
        let spec = function_spec();
        let node = NodeId::new("worker");
        let k = |task: Option<(&str, &Value)>| {
            derive_key(FP, &node, &spec, &CacheKeySpec::Default, &base(), task).unwrap()
        };
        let p1 = json!({"n": 1});
        let p2 = json!({"n": 2});
        assert_ne!(k(None), k(Some(("t1", &p1))));
        assert_ne!(k(Some(("t1", &p1))), k(Some(("t2", &p1))));
        assert_ne!(k(Some(("t1", &p1))), k(Some(("t1", &p2))));
        assert_eq!(k(Some(("t1", &p1))), k(Some(("t1", &json!({"n": 1})))));
    }

    #[test]
    fn an_unrenderable_input_is_an_error_naming_the_node() {
        let spec = paladin_spec("Answer: {missing}", "m1");
        let err = derive_key(
            FP,
            &NodeId::new("answerer"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err,
            CacheKeyError::InputNotRendered {
                node: NodeId::new("answerer"),
                source: TemplateError::MissingField("missing".into()),
            }
        );
        assert!(err.to_string().contains("answerer"));
    }
}
