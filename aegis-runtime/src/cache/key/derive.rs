//! Deriving one activation's key from its node's seed and the snapshot.

use serde_json::Value;
use std::borrow::Cow;

use super::seed::KeySeed;
use super::text::CacheKey;
use crate::canon::{Canon, inline_in_key};
use crate::graph::{NodeSpec, TemplateError};
use crate::id::NodeId;
use crate::policy::{CacheKeySpec, CacheScope};
use crate::state::{Battlefield, FieldName, FieldPart};

/// What the rest of a key's stream encodes, one code each: a number costs
/// fewer bytes to hash than a label, and a key that fits one SHA-256 block
/// after its seed costs one compression.
const PALADIN_INPUT: u64 = 1;
const PALADIN_INPUT_AND_FIELDS: u64 = 2;
const FUNCTION_SNAPSHOT: u64 = 3;
const FUNCTION_FIELDS: u64 = 4;
/// Opens a key's own stream when the engine has a cache namespace: no
/// input begins with a number, so a namespaced key's stream is never an
/// un-namespaced one's.
const NAMESPACE: u64 = 5;

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

/// Derives the graph-scoped cache key of one activation of `node_id`, with
/// no namespace.
///
/// The digest covers, in a canonical length-prefixed encoding: the key
/// version, the graph fingerprint, the node id, the node's code version
/// (a Function node's [`StateNode::code_version`](crate::graph::StateNode::code_version),
/// when it has one), the node's input and, when the activation is a
/// mustered task, its `task_key` and payload. (The engine also derives
/// node-scoped keys, which cover the node's own shape in place of the graph
/// fingerprint, and adds its cache namespace: see [`CacheScope`].) The
/// input is:
///
/// - for a Paladin node, its rendered [`InputMapping`](crate::graph::InputMapping)
///   and [`Paladin::config_fingerprint`](crate::paladin::Paladin::config_fingerprint)
///   (model, system prompt, temperature, max_loops, stop words, tools), plus,
///   under [`CacheKeySpec::Fields`], the named fields' values;
/// - for a Function node, the whole snapshot under [`CacheKeySpec::Default`],
///   or only the named fields' values under [`CacheKeySpec::Fields`].
///
/// A state field enters the digest as its name and the SHA-256 of its
/// value's canonical encoding (objects by sorted key, numbers by value, so
/// `1`, `1.0` and `1e0` agree, whatever serde_json features the build
/// enables). That digest is memoised on the stored value: a snapshot hashes
/// each value at most once, and later snapshots that did not rewrite a field
/// reuse its digest, so a key costs in proportion to what changed. A
/// scalar no longer than a digest (`null`, a boolean, a number, a string of
/// at most 32 bytes) enters as its canonical encoding instead: hashing it
/// apart would cost a SHA-256 block to shorten it by nothing.
///
/// A named field that is not set is encoded as absent, distinct from `null`.
/// The same field set named in any order, or repeated, gives the same key.
///
/// The key's text is `v4:{graph}:{node}:{digest}` ([`CacheKey`]).
///
/// ```
/// use aegis_runtime::__internal::{derive_key, initial_state};
/// use aegis_runtime::graph::{InputMapping, NodeSpec};
/// use aegis_runtime::id::NodeId;
/// use aegis_runtime::paladin::Paladin;
/// use aegis_runtime::policy::CacheKeySpec;
/// use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec};
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
/// assert!(key(&state)?.text().starts_with("v4:"));
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
    let seed = KeySeed::new(CacheScope::Graph, graph_fingerprint, node_id, spec);
    derive_key_seeded(&seed, spec, key, state, task, None)
}

/// [`derive_key`] from the node's [`KeySeed`], which names the node and
/// its scope, in the cache `namespace` (none: `None`): the key without
/// re-deriving what every key of the node shares. A namespace costs a key
/// its few bytes; without one, a key costs what it did before namespaces.
pub(crate) fn derive_key_seeded(
    seed: &KeySeed,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    state: &Battlefield,
    task: Option<(&str, &Value)>,
    namespace: Option<&str>,
) -> Result<CacheKey, CacheKeyError> {
    let node_id = &seed.node;
    let code = match (spec, key) {
        (NodeSpec::Paladin { .. }, CacheKeySpec::Default) => PALADIN_INPUT,
        (NodeSpec::Paladin { .. }, CacheKeySpec::Fields(_)) => PALADIN_INPUT_AND_FIELDS,
        (_, CacheKeySpec::Default) => FUNCTION_SNAPSHOT,
        (_, CacheKeySpec::Fields(_)) => FUNCTION_FIELDS,
    };
    let mut h = seed.input(code).clone();
    if let Some(namespace) = namespace {
        h.u64(NAMESPACE).str(namespace);
    }

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
            let config = match &seed.paladin_config {
                Some(config) => Cow::Borrowed(config.as_str()),
                // A seed made for another kind of node: never the engine's.
                None => Cow::Owned(paladin.config_fingerprint()),
            };
            debug_assert_eq!(
                *config,
                paladin.config_fingerprint(),
                "a KeySeed serves one node"
            );
            match key {
                CacheKeySpec::Default => {
                    h.str(&config).str(&rendered);
                }
                CacheKeySpec::Fields(fields) => {
                    h.str(&config).str(&rendered);
                    hash_fields(&mut h, fields, state);
                }
            }
        }
        NodeSpec::Function(_) => match key {
            CacheKeySpec::Default => {
                // Every set field in name order, each by its memoised
                // digest: unchanged fields are not re-read.
                h.count(state.field_count());
                for (name, part) in state.field_parts() {
                    h.str(name.as_str());
                    key_part(&mut h, part);
                }
            }
            CacheKeySpec::Fields(fields) => hash_fields(&mut h, fields, state),
        },
    }

    // Absent and a task's key are told apart by their tags.
    match task {
        None => h.absent(),
        Some((task_key, payload)) => h.str(task_key).json(payload),
    };

    Ok(CacheKey::derived(seed.scopes, h.digest()))
}

fn hash_fields(h: &mut Canon, fields: &[FieldName], state: &Battlefield) {
    let mut names: Vec<&str> = fields.iter().map(FieldName::as_str).collect();
    names.sort_unstable();
    names.dedup();
    h.count(names.len());
    for name in names {
        h.str(name);
        match state.field_part(name) {
            Some(part) => key_part(h, part),
            None => {
                h.absent();
            }
        }
    }
}

/// A field's value in a key: in place when [`inline_in_key`], else by its
/// memoised digest.
fn key_part(h: &mut Canon, part: FieldPart<'_>) {
    match part.plain() {
        Some(value) if inline_in_key(value) => h.json(value),
        // An empty list encodes as the empty array it reads as.
        None if part.is_empty_list() => h.json(&Value::Array(Vec::new())),
        _ => h.digest32(&part.digest()),
    };
}
