//! The fixed graph whose fingerprint is pinned: shared (by `#[path]`) by the
//! crate's fingerprint tests and by this project, which computes it with
//! serde_json's `preserve_order` enabled.
//!
//! Every JSON object below is written with its keys out of order, so a
//! fingerprint that followed `serde_json::Map`'s iteration order would
//! differ between the two builds.

use aegis::{
    graph::{EngineLimits, InputMapping, NodeSpec, ParleyExpiry, WarGraph},
    id::{END, NodeId, START},
    paladin::Paladin,
    policy::{Aegis, CacheKeySpec, CachePolicy, ErrorHandlerSpec},
    state::{BattlefieldSchema, CacheMarker, DispatchRule, FieldName, FieldSpec, StateDelta},
};
use aegis_runtime::__internal::{Writer, derive_key, initial_state, merge};
use serde_json::json;
use std::time::Duration;

/// The fingerprint of [`golden_graph`]. Change it only together with
/// `FINGERPRINT_VERSION`.
pub const GOLDEN_FINGERPRINT: &str =
    "v7:913c7c012034fa397d3723c6b703dd27733cb6788843498e9ba164dccedb571f";

/// The node cache key [`golden_cache_key`] derives. Change it only together
/// with `CACHE_KEY_VERSION`.
pub const GOLDEN_CACHE_KEY: &str = "v4:e56f3ecd3cf056ab:2584a5a1d6fed921:f51733d57d8d3aeff50a7401df8fb50d13a798280ebd565af7433c0507d9dfad";

fn field(name: &str) -> FieldName {
    FieldName::new(name).unwrap()
}

/// A graph touching every part of the fingerprint: field defaults with
/// nested objects and numbers in several spellings, every node kind, a
/// worker template, `on_error` (with a JSON delta) and `cache` policies,
/// static and conditional edges, a dynamic target.
pub fn golden_graph() -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            field("settings"),
            DispatchRule::Merge,
            Some(json!({"zeta": {"y": 2.0, "x": 1}, "alpha": [1.5, -0.0, 1e3], "mid": null})),
            false,
        ),
        FieldSpec::new(field("question"), DispatchRule::LastWrite, None, true),
        FieldSpec::new(field("answer"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(field("log"), DispatchRule::Append, Some(json!([])), false)
            .with_cache(CacheMarker::Deny),
        FieldSpec::new(field("total"), DispatchRule::Sum, Some(json!(0)), false),
        FieldSpec::new(field("error"), DispatchRule::LastWrite, None, false),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());

    g.add_node(
        "plan",
        NodeSpec::from_fn("plan", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    );
    g.add_node(
        "answer",
        NodeSpec::paladin(
            Paladin::new("Answerer")
                .with_model("gpt-4o")
                .with_system_prompt("Be brief.")
                .with_temperature(0.25)
                .with_stop_word("STOP"),
            InputMapping::new("Answer: {question}"),
            field("answer"),
        )
        .with_output_schema(json!({
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string", "maxLength": 400}, "confidence": {"type": "number", "maximum": 1.0}},
        })),
    );
    g.add_worker_template(
        "score",
        NodeSpec::from_fn("score", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    );
    g.add_node(
        "review",
        NodeSpec::Gate {
            prompt: "Ship it?".into(),
            expires_after: Some(Duration::from_secs(86_400)),
            on_expire: ParleyExpiry::Fail,
            approve: "ship".into(),
            reject: "plan".into(),
        },
    );
    g.add_node(
        "ship",
        NodeSpec::from_fn("ship", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    );
    g.add_node(
        "fix",
        NodeSpec::from_fn("fix", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    );

    let mut fallback = StateDelta::new();
    fallback
        .set("settings", json!({"b": 2, "a": {"d": 4.0, "c": 3}}))
        .unwrap();
    g.set_aegis(
        "plan",
        Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
            fallback_delta: fallback,
        }),
    );
    g.set_aegis(
        "answer",
        Aegis::new()
            .with_on_error(ErrorHandlerSpec::Route {
                to: "fix".into(),
                error_field: field("error"),
            })
            .with_cache(CachePolicy::new(
                Duration::from_secs(3_600),
                CacheKeySpec::Fields(vec![field("question")]),
            )),
    );

    g.add_edge(START, "plan")
        .add_edge("plan", "answer")
        .add_edge("score", "review")
        .add_edge("fix", "review")
        .add_edge("ship", END)
        .add_conditional_edges("answer", "route_answer", ["review", "plan"])
        .mark_dynamic_target("score");
    g
}

/// A Function node's key over a whole snapshot and a mustered task, every
/// object written out of key order and numbers in several spellings, one
/// list built by appends: each value enters the key as the digest of its
/// canonical encoding, which must not follow `serde_json::Map`'s order.
pub fn golden_cache_key() -> String {
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(field("settings"), DispatchRule::Merge, None, false),
        FieldSpec::new(field("question"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(field("log"), DispatchRule::Append, None, false),
        FieldSpec::new(field("total"), DispatchRule::Sum, None, false),
    ]);
    let input = json!({
        "settings": {"zeta": {"y": 2.0, "x": [1, {"q": null, "p": 1e2}]}, "alpha": true},
        "question": "why?",
        "log": [{"b": 1, "a": 0.5}],
    });
    let mut state = initial_state(&schema, &input).unwrap();
    let mut delta = StateDelta::new();
    delta
        .set("log", json!({"d": [3.0], "c": "x"}))
        .unwrap()
        .set("settings", json!({"mid": {"n": 1, "m": -0.0}}))
        .unwrap()
        .set("total", 4.0)
        .unwrap();
    state = merge(&schema, &state, [(Writer::node("plan"), &delta)]).unwrap();
    let spec = NodeSpec::from_fn("plan", |_, _| {
        Box::pin(async { Ok(StateDelta::new().into()) })
    });
    let payload = json!({"z": [1, 2], "a": {"y": 1, "x": 2}});
    derive_key(
        "v7:golden",
        &NodeId::new("plan"),
        &spec,
        &CacheKeySpec::Default,
        &state,
        Some(("task-1", &payload)),
    )
    .unwrap()
    .to_string()
}
