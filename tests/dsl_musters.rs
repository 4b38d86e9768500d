//! Declared fan-outs: `graph!`'s `musters { planner -> answer }` declares
//! the same musters as `WarGraph::declare_muster`, draws them, and a graph
//! that declares its musters refuses one it did not declare at run time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::prelude::*;
use serde_json::json;
use support::fixtures::engine;

/// Musters two tasks to `answer`.
#[aegis]
async fn planner(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    let tasks = ["a", "b"].map(|k| (k.to_string(), json!(k)));
    Ok(Directive::muster(StateDelta::new(), "answer", tasks))
}

/// Musters one task to `answer`, but no muster from it is declared.
#[aegis]
async fn rogue(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::muster(
        StateDelta::new(),
        "answer",
        [("c".to_string(), json!("c"))],
    ))
}

/// Records its task's key.
#[aegis]
async fn answer(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let key = ctx.task().map(|t| t.task_key.clone()).unwrap_or_default();
    let mut delta = StateDelta::new();
    delta.set("keys", vec![key])?;
    Ok(delta)
}

fn declared() -> WarGraph {
    graph! {
        schema { keys: Append = [] }
        nodes { planner, rogue, worker answer }
        edges { START -> [planner, rogue]; answer -> END; }
        musters { planner -> answer }
    }
}

#[test]
fn the_musters_section_declares_what_the_builder_declares() {
    let g = declared();
    assert_eq!(
        g.musters()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect::<Vec<_>>(),
        [("planner", "answer")]
    );
    let mut built = graph! {
        schema { keys: Append = [] }
        nodes { planner, rogue, worker answer }
        edges { START -> [planner, rogue]; answer -> END; }
    };
    let undeclared = built.fingerprint();
    built.declare_muster("planner", "answer");
    assert_eq!(built.fingerprint(), g.fingerprint());
    assert_ne!(undeclared, g.fingerprint(), "declared musters are identity");
    g.validate().unwrap();
    // planner is n0, answer n2: the fan-out is drawn dashed between them.
    assert!(g.to_mermaid().contains("n0 -.->|muster| n2"));
}

#[tokio::test]
async fn a_graph_that_declares_its_musters_refuses_an_undeclared_one() {
    let out = engine().start(&declared(), "t", json!({})).await.unwrap();
    match out.into_result() {
        Err(EngineError::MusterUndeclared { node, worker }) => {
            assert_eq!((node.as_str(), worker.as_str()), ("rogue", "answer"));
        }
        other => panic!("unexpected {other:?}"),
    }

    // Declaring the second fan-out too lets both run.
    let mut both = declared();
    both.declare_muster("rogue", "answer");
    let state = engine()
        .start(&both, "t", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("keys"), Some(&json!(["a", "b", "c"])));
}
