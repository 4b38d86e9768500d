//! Muster and parley: a fan-out over 20 items (one task each, merged in task
//! order), then a gate that asks a human for approval; the example answers
//! itself and resumes the run.
//!
//! Run it with `cargo run --example muster_and_parley`.

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyResponse;
use aegis::graph::StateNode;
use aegis::prelude::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Musters one task per item.
struct Split;

#[async_trait]
impl StateNode for Split {
    fn kind_name(&self) -> &str {
        "split"
    }

    async fn run(&self, state: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        let items = state
            .get("items")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        let tasks = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| (format!("item-{i:02}"), item));
        Ok(Directive::muster(StateDelta::new(), "score", tasks))
    }
}

/// Scores one item; later items finish first, yet merge in task order.
struct Score;

#[async_trait]
impl StateNode for Score {
    fn kind_name(&self) -> &str {
        "score"
    }

    async fn run(&self, _: &Battlefield, ctx: &NodeContext) -> Result<Directive, StateNodeError> {
        let task = ctx
            .task()
            .ok_or_else(|| StateNodeError::permanent("score runs only as a task"))?;
        let n = task.payload.as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(40 - 2 * n.min(20))).await;
        let mut delta = StateDelta::new();
        delta
            .set(
                "scores",
                vec![json!({ "task": task.task_key, "score": n * n })],
            )?
            .set("total", n * n)?;
        Ok(delta.into())
    }
}

fn field(name: &str, rule: DispatchRule) -> Result<FieldSpec, Box<dyn std::error::Error>> {
    Ok(FieldSpec::new(FieldName::new(name)?, rule, None, false))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(vec![
        field("items", DispatchRule::LastWrite)?,
        field("scores", DispatchRule::Append)?,
        field("total", DispatchRule::Sum)?,
        field("status", DispatchRule::LastWrite)?,
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node("split", NodeSpec::function(Split))
        .add_worker_template("score", NodeSpec::function(Score))
        .add_node(
            "approval",
            NodeSpec::gate("Publish these scores?", "publish", "discard"),
        )
        .add_node(
            "publish",
            NodeSpec::from_fn("publish", |_, _| {
                Box::pin(async {
                    let mut d = StateDelta::new();
                    d.set("status", "published")?;
                    Ok(d.into())
                })
            }),
        )
        .add_node(
            "discard",
            NodeSpec::from_fn("discard", |_, _| {
                Box::pin(async {
                    let mut d = StateDelta::new();
                    d.set("status", "discarded")?;
                    Ok(d.into())
                })
            }),
        )
        .add_edge(START, "split")
        .add_edge("score", "approval")
        .add_edge("publish", END)
        .add_edge("discard", END);
    // Each scoring task retries on its own.
    graph.set_aegis("score", Aegis::new().with_retry(RetryPolicy::default()));
    println!("{}", graph.to_mermaid());

    let store = Arc::new(InMemoryWaypointStore::new());
    let items: Vec<u64> = (0..20).collect();
    let engine = WarEngine::new(store.clone());
    let outcome = engine
        .start(&graph, "batch-7", json!({ "items": items }))
        .await?;
    if let RunOutcome::AwaitingInput {
        requests, state, ..
    } = &outcome
    {
        println!(
            "waiting for a human: {:?} asks {:?}",
            requests[0].0, requests[0].1.prompt
        );
        println!(
            "total so far: {}",
            state.get("total").cloned().unwrap_or_default()
        );
    }

    println!("the human answers: approve");
    let resumed = WarEngine::new(store);
    let state = resumed
        .resume(
            &graph,
            "batch-7",
            Some(ParleyResponse::new(json!("approve"))),
        )
        .await?
        .into_result()?;
    let first: Vec<_> = state
        .get("scores")
        .and_then(|s| s.as_array())
        .map(|a| a[..3].to_vec())
        .unwrap_or_default();
    println!("first scores (task order): {}", json!(first));
    println!(
        "status: {}, total: {}",
        state.get("status").cloned().unwrap_or_default(),
        state.get("total").cloned().unwrap_or_default()
    );
    Ok(())
}
