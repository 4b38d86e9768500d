//! The key scheme's tests: stability, scopes, text round trips.

use serde_json::Value;

use super::seed::KeySeed;
use super::text::Repr;
use super::{CacheKey, CacheKeyError, derive_key, derive_key_seeded};
use crate::canon::{Canon, inline_in_key};
use crate::error::StateNodeError;
use crate::graph::NodeContext;
use crate::graph::Paladin;
use crate::graph::{Directive, InputMapping, StateNode};
use crate::graph::{NodeSpec, TemplateError};
use crate::id::NodeId;
use crate::policy::{CacheKeySpec, CacheScope};
use crate::state::{Battlefield, FieldName};
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

/// A Function node of kind `kind` whose code has version `version`.
struct Versioned {
    kind: &'static str,
    version: Option<&'static str>,
}
#[async_trait::async_trait]
impl StateNode for Versioned {
    fn kind_name(&self) -> &str {
        self.kind
    }

    fn code_version(&self) -> Option<&str> {
        self.version
    }

    async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        Ok(Directive::edges(crate::state::StateDelta::new()))
    }
}

fn versioned(kind: &'static str, version: Option<&'static str>) -> NodeSpec {
    NodeSpec::function(Versioned { kind, version })
}

/// A key of `node` in `scope` (graph-scoped keys in the graph `fp`),
/// in `namespace`.
fn scoped(
    (scope, fp, namespace): (CacheScope, &str, Option<&str>),
    node: &str,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    st: &Battlefield,
    task: Option<(&str, &Value)>,
) -> CacheKey {
    let seed = KeySeed::new(scope, fp, &NodeId::new(node), spec);
    derive_key_seeded(&seed, spec, key, st, task, namespace).unwrap()
}

/// A node-scoped key of `answerer`'s Default key over `st`.
fn nkey(spec: &NodeSpec, st: &Battlefield) -> CacheKey {
    scoped(
        (CacheScope::Node, FP, None),
        "answerer",
        spec,
        &CacheKeySpec::Default,
        st,
        None,
    )
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
    assert!(a.text().starts_with("v4:"));
    assert_eq!(a.text().len(), "v4:".len() + 16 + 1 + 16 + 1 + 64);
}

#[test]
fn a_key_read_back_from_its_text_is_the_same_key() {
    use std::hash::BuildHasher;
    let hasher = std::collections::hash_map::RandomState::new();
    let key = pkey(&function_spec(), &CacheKeySpec::Default, &base());
    let text = key.text().into_owned();
    let back = CacheKey::from_raw(text.clone());
    assert_eq!(back, key);
    assert_eq!(hasher.hash_one(&back), hasher.hash_one(&key));
    assert_eq!(back.to_string(), text);
    assert_eq!(format!("{key:?}"), format!("CacheKey({text})"));
    assert!(
        matches!(back.0, Repr::Derived { .. }),
        "parsed, not kept as text"
    );
    // Text that only resembles a key's stays text, and is another key.
    for near in [
        text.to_uppercase().replacen("V4", "v4", 1),
        text.replacen("v4:", "v3:", 1),
        format!("{text}0"),
        text[..text.len() - 1].to_string(),
        text.replacen(':', ";", 2),
    ] {
        let other = CacheKey::from_raw(near.clone());
        assert!(matches!(other.0, Repr::Text(_)), "{near}");
        assert_ne!(other, key, "{near}");
        assert_eq!(other.text(), near);
    }
}

#[test]
fn keys_match_prefixes_and_order_by_their_text() {
    let node = NodeId::new("answerer");
    let key = pkey(&function_spec(), &CacheKeySpec::Default, &base());
    assert!(key.starts_with(&CacheKey::graph_prefix(FP)));
    assert!(key.starts_with(&CacheKey::node_prefix(FP, &node)));
    assert!(!key.starts_with(&CacheKey::node_prefix(FP, &NodeId::new("other"))));
    assert!(!key.starts_with(&CacheKey::graph_prefix("v6:graph-b")));
    assert!(key.text().starts_with(&CacheKey::node_prefix(FP, &node)));
    let other = pkey(
        &function_spec(),
        &CacheKeySpec::Default,
        &state(json!({"other": 2})),
    );
    let mut keys = [
        CacheKey::from_raw("v4:z"),
        other.clone(),
        CacheKey::from_raw("a"),
        key.clone(),
    ];
    keys.sort();
    let texts: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let mut sorted = texts.clone();
    sorted.sort();
    assert_eq!(texts, sorted);
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
    assert!(a.text().starts_with(&CacheKey::graph_prefix("v6:graph-a")));
    assert!(!b.text().starts_with(&CacheKey::graph_prefix("v6:graph-a")));
}

#[test]
fn the_code_version_changes_the_key_in_both_scopes() {
    let node = NodeId::new("answerer");
    let specs = [
        versioned("answer", None),
        versioned("answer", Some("1")),
        versioned("answer", Some("2")),
        versioned("answer", Some("")),
    ];
    let graph: std::collections::BTreeSet<CacheKey> = specs
        .iter()
        .map(|s| pkey(s, &CacheKeySpec::Default, &base()))
        .collect();
    let node_scoped: std::collections::BTreeSet<CacheKey> =
        specs.iter().map(|s| nkey(s, &base())).collect();
    assert_eq!((graph.len(), node_scoped.len()), (4, 4));
    // ... and each scope's prefix still covers every version.
    assert!(
        graph
            .iter()
            .all(|k| k.starts_with(&CacheKey::node_prefix(FP, &node)))
    );
    assert!(
        node_scoped
            .iter()
            .all(|k| k.starts_with(&CacheKey::node_scope_prefix(&node)))
    );
    // Equal versions, equal keys.
    assert_eq!(
        nkey(&versioned("answer", Some("1")), &base()),
        nkey(&versioned("answer", Some("1")), &base())
    );
}

#[test]
fn a_node_scoped_key_ignores_the_graph_but_not_the_scope() {
    let spec = versioned("answer", Some("1"));
    let node = NodeId::new("answerer");
    let key = |scope, fp| {
        scoped(
            (scope, fp, None),
            "answerer",
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
    };
    let a = key(CacheScope::Node, "v6:graph-a");
    assert_eq!(a, key(CacheScope::Node, "v6:graph-b"));
    assert_ne!(a, key(CacheScope::Graph, "v6:graph-a"));
    assert!(a.starts_with(&CacheKey::node_scope_prefix(&node)));
    assert!(!a.starts_with(&CacheKey::node_scope_prefix(&NodeId::new("other"))));
    for fp in ["v6:graph-a", "v6:graph-b"] {
        assert!(!a.starts_with(&CacheKey::graph_prefix(fp)));
        assert!(!key(CacheScope::Graph, fp).starts_with(&CacheKey::node_scope_prefix(&node)));
    }
    // Another node id: another key and another prefix.
    let other = scoped(
        (CacheScope::Node, FP, None),
        "other",
        &spec,
        &CacheKeySpec::Default,
        &base(),
        None,
    );
    assert_ne!(a, other);
    assert!(other.starts_with(&CacheKey::node_scope_prefix(&NodeId::new("other"))));
}

#[test]
fn a_node_scoped_key_covers_the_node_shape() {
    let answer = f("answer");
    let paladin = |p: Paladin, template: &str, output: &FieldName| {
        NodeSpec::paladin(p, InputMapping::new(template), output.clone())
    };
    let m1 = || Paladin::new("A").with_model("m1");
    let specs = [
        paladin(m1(), "Q: {question}", &answer),
        paladin(Paladin::new("A").with_model("m2"), "Q: {question}", &answer),
        paladin(
            m1().with_system_prompt("be terse"),
            "Q: {question}",
            &answer,
        ),
        paladin(m1().with_temperature(0.2), "Q: {question}", &answer),
        // The same rendered text from another template: still another key.
        paladin(m1(), "Q: {question}{context}", &answer),
        paladin(m1(), "Q: {question}", &f("reply")),
        paladin(m1(), "Q: {question}", &answer).with_output_schema(json!({"type": "string"})),
        versioned("answer", Some("1")),
        versioned("renamed", Some("1")),
    ];
    let st = state(json!({"question": "why?", "context": ""}));
    let keys: std::collections::BTreeSet<CacheKey> = specs.iter().map(|s| nkey(s, &st)).collect();
    assert_eq!(keys.len(), specs.len());
}

#[test]
fn the_namespace_enters_every_key_and_costs_none_without_one() {
    let spec = versioned("answer", Some("1"));
    let paladin = paladin_spec("Answer: {question}", "m1");
    for scope in [CacheScope::Graph, CacheScope::Node] {
        for spec in [&spec, &paladin] {
            let key = |namespace| {
                scoped(
                    (scope, FP, namespace),
                    "answerer",
                    spec,
                    &CacheKeySpec::Default,
                    &base(),
                    None,
                )
            };
            let keys: std::collections::BTreeSet<CacheKey> = [None, Some("a"), Some("b"), Some("")]
                .into_iter()
                .map(key)
                .collect();
            assert_eq!(keys.len(), 4, "{scope:?}");
            assert_eq!(key(Some("a")), key(Some("a")));
            // The prefixes are the namespace's too.
            let prefix = key(None).text()[..37].to_string();
            assert!(keys.iter().all(|k| k.starts_with(&prefix)));
        }
    }
    // Without one, the engine's key is `derive_key`'s.
    assert_eq!(
        scoped(
            (CacheScope::Graph, FP, None),
            "answerer",
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None
        ),
        pkey(&spec, &CacheKeySpec::Default, &base())
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
        a.text()
            .starts_with(&CacheKey::node_prefix(FP, &NodeId::new("a")))
    );
    assert!(
        !b.text()
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

/// The v4 encoding written out from the materialised snapshot, each
/// value hashed afresh: what the seeds and the memoised digests must
/// reproduce.
fn from_scratch(
    (scope, fp, namespace): (CacheScope, &str, Option<&str>),
    node: &str,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    st: &Battlefield,
    task: Option<(&str, &Value)>,
) -> String {
    use crate::canon::value_digest;
    let field = |h: &mut Canon, name: &str| {
        h.str(name);
        match st.get(name) {
            Some(v) if inline_in_key(v) => h.json(v),
            Some(v) => h.digest32(&value_digest(v)),
            None => h.absent(),
        };
    };
    let fields = |h: &mut Canon, names: &[FieldName]| {
        let set: std::collections::BTreeSet<&str> = names.iter().map(FieldName::as_str).collect();
        h.count(set.len());
        for name in set {
            field(h, name);
        }
    };
    let segment = |stream: &Canon, label: &str| {
        let mut c = stream.clone();
        c.str(label);
        crate::canon::hex(&c.digest()[..8])
    };
    let code_version = |h: &mut Canon| {
        match spec {
            NodeSpec::Function(n) => match n.code_version() {
                Some(v) => h.str(v),
                None => h.absent(),
            },
            _ => h.absent(),
        };
    };
    let mut root = Canon::new("aegis-node-cache/key");
    root.str("v4");
    match scope {
        CacheScope::Node => root.u64(1).align(),
        _ => root.str(fp).align(),
    };
    let mut h = root.clone();
    h.str(node);
    let prefix = format!(
        "v4:{}:{}:",
        segment(&root, "graph-scope"),
        segment(&h, "node-scope")
    );
    match (scope, spec) {
        (CacheScope::Node, NodeSpec::Function(n)) => {
            h.str("function").str(n.kind_name());
            code_version(&mut h);
        }
        (
            CacheScope::Node,
            NodeSpec::Paladin {
                paladin,
                input,
                output_field,
                output_schema,
            },
        ) => {
            h.str("paladin")
                .str(&paladin.config_fingerprint())
                .str(input.template())
                .str(output_field.as_str())
                .serialize(output_schema);
        }
        _ => {
            code_version(&mut h);
        }
    }
    h.align();
    let code = match (spec, key) {
        (NodeSpec::Paladin { .. }, CacheKeySpec::Default) => 1,
        (NodeSpec::Paladin { .. }, CacheKeySpec::Fields(_)) => 2,
        (_, CacheKeySpec::Default) => 3,
        (_, CacheKeySpec::Fields(_)) => 4,
    };
    h.u64(code).align();
    if let Some(namespace) = namespace {
        h.u64(5).str(namespace);
    }
    match (spec, key) {
        (NodeSpec::Paladin { paladin, input, .. }, _) => {
            let rendered = input.render_task(st, task).unwrap();
            h.str(&paladin.config_fingerprint()).str(&rendered);
            if let CacheKeySpec::Fields(names) = key {
                fields(&mut h, names);
            }
        }
        (_, CacheKeySpec::Default) => {
            let names: Vec<&FieldName> = st.field_names().collect();
            h.count(names.len());
            for name in names {
                field(&mut h, name.as_str());
            }
        }
        (_, CacheKeySpec::Fields(names)) => {
            fields(&mut h, names);
        }
    }
    match task {
        None => h.absent(),
        Some((k, p)) => h.str(k).json(p),
    };
    format!("{prefix}{}", h.hex())
}

fn schema_of_all_rules() -> BattlefieldSchema {
    BattlefieldSchema::new(vec![
        FieldSpec::new(f("question"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(f("log"), DispatchRule::Append, None, false),
        FieldSpec::new(f("total"), DispatchRule::Sum, None, false),
        FieldSpec::new(f("meta"), DispatchRule::Merge, None, false),
    ])
}

/// Snapshots after a few merges: lists built by appends, sums, merged
/// objects, and fields no superstep touched (sharing their digests).
fn evolved() -> Vec<Battlefield> {
    use crate::state::{StateDelta, Writer, merge};
    let schema = schema_of_all_rules();
    let mut st = initial_state(&schema, &json!({"question": "q", "log": [1]})).unwrap();
    let mut out = vec![st.clone()];
    let writes = [
        json!({"log": {"b": 2, "a": [1.0, null]}, "total": 1}),
        json!({"meta": {"z": 1, "y": {"k": "v"}}, "log": [3, 4]}),
        json!({"total": 2.5, "question": "q2"}),
        json!({"log": "x", "meta": {"a": 1e2}}),
    ];
    for w in writes {
        let mut d = StateDelta::new();
        for (k, v) in w.as_object().unwrap() {
            d.set(k.as_str(), v).unwrap();
        }
        st = merge(&schema, &st, [(Writer::node("w"), &d)]).unwrap();
        out.push(st.clone());
    }
    out
}

#[test]
fn memoised_digests_give_the_key_hashed_from_scratch() {
    let specs = [
        (function_spec(), CacheKeySpec::Default),
        (versioned("v", Some("c0de")), CacheKeySpec::Default),
        (
            function_spec(),
            CacheKeySpec::Fields(vec![f("log"), f("meta"), f("absent")]),
        ),
        (
            paladin_spec("Q: {question}", "m"),
            CacheKeySpec::Fields(vec![f("total"), f("log")]),
        ),
        (paladin_spec("Q: {question}", "m"), CacheKeySpec::Default),
    ];
    let payload = json!({"b": [1, 2], "a": 1.0});
    for st in evolved() {
        for (spec, key) in &specs {
            for task in [None, Some(("t1", &payload))] {
                // Twice: the second derivation reads the memo the first
                // filled.
                for _ in 0..2 {
                    let derived = derive_key(FP, &NodeId::new("n"), spec, key, &st, task);
                    assert_eq!(
                        derived.unwrap().text(),
                        from_scratch((CacheScope::Graph, FP, None), "n", spec, key, &st, task)
                    );
                    for keying in [
                        (CacheScope::Node, FP, None),
                        (CacheScope::Node, FP, Some("tenant-a")),
                        (CacheScope::Graph, FP, Some("tenant-a")),
                    ] {
                        assert_eq!(
                            scoped(keying, "n", spec, key, &st, task).text(),
                            from_scratch(keying, "n", spec, key, &st, task)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn one_seed_gives_every_key_derive_key_gives() {
    let node = NodeId::new("answerer");
    let payload = json!([1, {"x": null}]);
    for spec in [paladin_spec("Answer: {question}", "m1"), function_spec()] {
        // A seed serves one node's spec, reused across states, key
        // specs and tasks.
        let seed = KeySeed::new(CacheScope::Graph, FP, &node, &spec);
        for st in evolved() {
            for key in [
                CacheKeySpec::Default,
                CacheKeySpec::Fields(vec![f("question"), f("log")]),
            ] {
                for task in [None, Some(("t", &payload))] {
                    assert_eq!(
                        derive_key_seeded(&seed, &spec, &key, &st, task, None).unwrap(),
                        derive_key(FP, &node, &spec, &key, &st, task).unwrap()
                    );
                }
            }
        }
        assert!(format!("{seed:?}").contains(&CacheKey::node_prefix(FP, &node)));
        let seed = KeySeed::node_scoped(&node, &spec);
        assert!(format!("{seed:?}").contains(&CacheKey::node_scope_prefix(&node)));
        assert_eq!(seed.scope(), CacheScope::Node);
    }
}

#[test]
fn a_list_built_by_appends_keys_like_the_same_list_given_as_input() {
    let schema = schema_of_all_rules();
    for st in evolved() {
        // The same values, every one a fresh plain value (lists too).
        let fresh = initial_state(&schema, &st.to_json()).unwrap();
        let restored: Battlefield =
            serde_json::from_value(serde_json::to_value(&st).unwrap()).unwrap();
        for key in [
            CacheKeySpec::Default,
            CacheKeySpec::Fields(vec![f("log"), f("meta")]),
        ] {
            let k = |s: &Battlefield| pkey(&function_spec(), &key, s);
            assert_eq!(k(&st), k(&fresh));
            assert_eq!(k(&st), k(&restored));
        }
    }
}

#[test]
fn equal_values_in_other_spellings_give_one_key() {
    let a = state(json!({"question": {"b": [1, 2.0], "a": 1e0}, "other": 100}));
    let b = state(json!({"question": {"a": 1, "b": [1.0, 2]}, "other": 1e2}));
    for key in [
        CacheKeySpec::Default,
        CacheKeySpec::Fields(vec![f("question"), f("other")]),
    ] {
        assert_eq!(
            pkey(&function_spec(), &key, &a),
            pkey(&function_spec(), &key, &b)
        );
    }
    let c = state(json!({"question": {"a": 1, "b": [1, 2.5]}, "other": 100}));
    assert_ne!(
        pkey(&function_spec(), &CacheKeySpec::Default, &a),
        pkey(&function_spec(), &CacheKeySpec::Default, &c)
    );
}

#[test]
fn a_field_no_superstep_wrote_shares_its_digest() {
    let states = evolved();
    let (first, last) = (&states[0], &states[states.len() - 1]);
    // `meta` was set, kept, then rewritten; `log` appended to;
    // `absent` never set; `question` is small: a key reads it in place.
    let digest = |s: &Battlefield, n: &str| s.digest_memo(n).map(|d| d as *const _);
    let (m2, m3) = (digest(&states[2], "meta"), digest(&states[3], "meta"));
    assert!(m2.is_some() && m2 == m3, "unchanged: one memo");
    assert_ne!(digest(first, "log"), digest(last, "log"));
    assert_ne!(digest(&states[3], "meta"), digest(&states[4], "meta"));
    assert_eq!(digest(last, "absent"), None);
    assert_eq!(digest(&states[1], "question"), None, "no memo kept");
}

#[test]
fn small_scalars_are_keyed_in_place_and_the_rest_by_digest() {
    let st = state(json!({
        "question": "why?",
        "other": 12345,
        "context": "a string longer than thirty-two bytes, so hashed",
        "log": ["listed"],
    }));
    let _ = pkey(&function_spec(), &CacheKeySpec::Default, &st);
    // Hashing these alone would cost a SHA-256 block each, per key.
    assert!(!st.digest_computed("question") && !st.digest_computed("other"));
    assert!(st.digest_computed("context") && st.digest_computed("log"));
    // ...and the snapshot keeps no memo for them at all.
    assert!(st.digest_memo("question").is_none() && st.digest_memo("other").is_none());
    assert!(inline_in_key(&json!(null)) && inline_in_key(&json!(1.5)));
    assert!(inline_in_key(&json!("x".repeat(32))) && !inline_in_key(&json!("x".repeat(33))));
    assert!(inline_in_key(&json!([])) && inline_in_key(&json!({})));
    assert!(!inline_in_key(&json!([1])) && !inline_in_key(&json!({"a": 1})));
}

/// The v4 encoding, pinned: a change to it must bump the version.
#[test]
fn the_v4_encoding_is_pinned() {
    let st = state(json!({"question": "why?", "log": [1, "two", {"b": null, "a": 2.5}]}));
    let payload = json!({"n": 1});
    assert_eq!(
        pkey(&function_spec(), &CacheKeySpec::Default, &st).text(),
        GOLDEN_FUNCTION_DEFAULT
    );
    assert_eq!(
        derive_key(
            FP,
            &NodeId::new("answerer"),
            &paladin_spec("Answer: {question}", "m1"),
            &CacheKeySpec::Fields(vec![f("log"), f("context")]),
            &st,
            Some(("t1", &payload)),
        )
        .unwrap()
        .text(),
        GOLDEN_PALADIN_FIELDS_TASK
    );
    let versioned = versioned("answer", Some("0123456789abcdef0123456789abcdef"));
    assert_eq!(
        pkey(&versioned, &CacheKeySpec::Default, &st).text(),
        GOLDEN_VERSIONED_FUNCTION
    );
    assert_eq!(
        scoped(
            (CacheScope::Node, FP, None),
            "answerer",
            &versioned,
            &CacheKeySpec::Fields(vec![f("question")]),
            &st,
            None
        )
        .text(),
        GOLDEN_NODE_SCOPED_FUNCTION
    );
    assert_eq!(
        scoped(
            (CacheScope::Node, FP, Some("tenant-a")),
            "answerer",
            &paladin_spec("Answer: {question}", "m1"),
            &CacheKeySpec::Default,
            &st,
            Some(("t1", &payload)),
        )
        .text(),
        GOLDEN_NODE_SCOPED_PALADIN_NAMESPACED
    );
}

const GOLDEN_FUNCTION_DEFAULT: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:48d60f1f21438de239ff11f413e2e4af3cf567bd09dd480144cb8fffa65a3eab";
const GOLDEN_PALADIN_FIELDS_TASK: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:6f2054c75ec7293425d6c40b9a20b634256ad7c0e5ee1f39f55241fbb3d50d17";
const GOLDEN_VERSIONED_FUNCTION: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:66f6a8970faff0136862554a0be35e7c8555ee76c4881bc9516b123430a981b1";
const GOLDEN_NODE_SCOPED_FUNCTION: &str = "v4:8056e1ca4322c026:4af0880313313e7c:e301adbffde75d219ee8f45f92d84ffb5a0363f8a0c0f055942ff21b3e47db91";
const GOLDEN_NODE_SCOPED_PALADIN_NAMESPACED: &str = "v4:8056e1ca4322c026:4af0880313313e7c:47f8ef28a5d29d491888142614b1289fe18e35777f38159731dd8c773bd37f03";
