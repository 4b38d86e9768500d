//! `graph!` with every node kind: worker templates, Battalions and Gates
//! build the same graph as the builder API, and run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyResponse;
use aegis::prelude::*;
use aegis::{graph::AegisNodeFn, waypoint::InMemoryWaypointStore};
use serde_json::json;
use std::sync::Arc;

#[aegis]
async fn split(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    let tasks = (0..3).map(|i| (format!("k{i}"), json!(i)));
    Ok(Directive::muster(StateDelta::new(), "score", tasks))
}

#[aegis(retry(max = 2, initial = "0ms"))]
async fn score(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let n = ctx.task().and_then(|t| t.payload.as_i64()).unwrap_or(0);
    let mut delta = StateDelta::new();
    delta.set("total", n * 10)?;
    Ok(delta)
}

fn child() -> WarGraph {
    let mut child = WarGraph::new(
        BattlefieldSchema::new(vec![
            FieldSpec::new(
                FieldName::new("x").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
            FieldSpec::new(
                FieldName::new("y").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
        ]),
        EngineLimits::default(),
    );
    child
        .add_node(
            "inc",
            NodeSpec::from_fn("inc", |state, _| {
                let x = state
                    .get("x")
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or(0);
                Box::pin(async move {
                    let mut d = StateDelta::new();
                    d.set("y", x + 1)?;
                    Ok(d.into())
                })
            }),
        )
        .add_edge(START, "inc")
        .add_edge("inc", END);
    child
}

fn done(value: &'static str) -> NodeSpec {
    NodeSpec::from_fn("done", move |_, _| {
        Box::pin(async move {
            let mut d = StateDelta::new();
            d.set("verdict", value)?;
            Ok(d.into())
        })
    })
}

fn dsl() -> WarGraph {
    graph! {
        schema {
            total: Sum,
            plus_one: LastWrite,
            verdict: LastWrite,
        }
        nodes {
            split,
            worker score,
            #[aegis(timeout(run = "1m"))]
            sub = battalion(child(), inputs(total -> x), outputs(y -> plus_one)),
            approval = gate(NodeSpec::gate("Ship?", "yes", "no")),
            yes = node(done("shipped")),
            no = node(done("held")),
        }
        edges {
            START -> split;
            score -> sub -> approval;
            yes -> END;
            no -> END;
        }
    }
}

fn builder() -> WarGraph {
    let mut g = WarGraph::new(
        BattlefieldSchema::new(vec![
            FieldSpec::new(
                FieldName::new("total").unwrap(),
                DispatchRule::Sum,
                None,
                false,
            ),
            FieldSpec::new(
                FieldName::new("plus_one").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
            FieldSpec::new(
                FieldName::new("verdict").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
        ]),
        EngineLimits::default(),
    );
    g.add_aegis_node(split {});
    g.add_worker_template("score", score::node_spec());
    g.set_aegis("score", score::aegis());
    g.add_node(
        "sub",
        NodeSpec::battalion(
            child(),
            vec![(
                FieldName::new("total").unwrap(),
                FieldName::new("x").unwrap(),
            )],
            vec![(
                FieldName::new("y").unwrap(),
                FieldName::new("plus_one").unwrap(),
            )],
        ),
    )
    .set_aegis(
        "sub",
        Aegis::new().with_timeout(TimeoutPolicy::run(std::time::Duration::from_secs(60))),
    )
    .add_node("approval", NodeSpec::gate("Ship?", "yes", "no"))
    .add_node("yes", done("shipped"))
    .add_node("no", done("held"))
    .add_edge(START, "split")
    .add_edge("score", "sub")
    .add_edge("sub", "approval")
    .add_edge("yes", END)
    .add_edge("no", END);
    g
}

#[tokio::test]
async fn every_node_kind_through_graph_matches_the_builder_and_runs() {
    let g = dsl();
    g.validate().unwrap();
    assert_eq!(g.fingerprint(), builder().fingerprint());
    assert!(g.is_worker_template(&NodeId::new("score")));

    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone());
    let out = engine.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(out.name(), "AwaitingInput");
    assert_eq!(out.state().get("plus_one"), Some(&json!(31)));
    let engine = WarEngine::new(store);
    let state = engine
        .resume(&g, "t", Some(ParleyResponse::new(json!("approve"))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("verdict"), Some(&json!("shipped")));
}
