//! Quickstart: a small research graph declared with `#[aegis]` and `graph!`
//! — a fan-out to two nodes, a join, a conditional edge, one flaky node under
//! a retry policy — run on an in-memory engine that prints a readable trace.
//!
//! Run it with `cargo run --example quickstart`. The same graph through the
//! builder API is `cargo run --example quickstart_builder`.

use aegis::engine::EdgeConditionEvaluator;
use aegis::prelude::*;
use aegis::trace::TraceEvent;
use serde_json::json;
use std::sync::Arc;

/// Splits the question into two research angles.
#[aegis]
async fn plan(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let topic = state
        .get("topic")
        .and_then(|v| v.as_str())
        .unwrap_or("nothing");
    let mut delta = StateDelta::new();
    delta.set("notes", vec![format!("plan: research {topic}")])?;
    Ok(delta)
}

/// Its archive fails transiently the first time: five attempts, 50 ms then
/// 100 ms apart (no jitter, so the trace is the same on every run), each cut
/// after 10 s.
#[aegis(retry(max = 5, initial = "50ms", jitter = false), timeout(run = "10s"))]
async fn history(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    if ctx.attempt() == 1 {
        return Err(StateNodeError::transient("archive returned 503"));
    }
    research("history", ctx)
}

/// The other angle, under the same policy; it succeeds at once.
#[aegis(retry(max = 5, initial = "50ms", jitter = false), timeout(run = "10s"))]
async fn science(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    research("science", ctx)
}

fn research(angle: &str, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta
        .set(
            "notes",
            format!("{angle}: found 3 sources (attempt {})", ctx.attempt()),
        )?
        .set("sources", 3)?;
    Ok(delta)
}

/// The join: runs once both research nodes are done.
#[aegis]
async fn summarize(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let sources = state.get("sources").and_then(|v| v.as_i64()).unwrap_or(0);
    let mut delta = StateDelta::new();
    delta.set("answer", format!("summary built on {sources} sources"))?;
    Ok(delta)
}

/// Runs only when the conditional edge finds too few sources.
#[aegis]
async fn review(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("reviewed", true)?;
    Ok(delta)
}

/// The evaluator the conditional edge names: a review below 10 sources.
struct EnoughSources;

#[async_trait]
impl EdgeConditionEvaluator for EnoughSources {
    async fn evaluate(&self, state: &Battlefield) -> Result<Vec<NodeId>, StateNodeError> {
        let sources = state.get("sources").and_then(|v| v.as_i64()).unwrap_or(0);
        Ok(vec![NodeId::new(if sources >= 10 {
            END
        } else {
            "review"
        })])
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = graph! {
        schema {
            topic: LastWrite required,
            notes: Append,
            sources: Sum = 0,
            answer: LastWrite,
            reviewed: LastWrite,
        }
        nodes { plan, history, science, summarize, review }
        edges {
            START -> plan -> [history, science] -> summarize;
            summarize ?> "enough-sources" -> [review, END];
            review -> END;
        }
    };
    println!("The graph, as Mermaid:\n{}", graph.to_mermaid());

    println!("Trace:");
    let engine = WarEngine::in_memory()
        .with_edge_evaluator("enough-sources", Arc::new(EnoughSources))
        .with_trace_sink(|event: TraceEvent| match event {
            TraceEvent::NodeStarted { .. } => {} // NodeFinished says it all
            event => println!("  {event}"),
        });
    let state = engine
        .start(&graph, "quickstart", json!({ "topic": "tea" }))
        .await?
        .into_result()?;
    println!(
        "Final state:\n{}",
        serde_json::to_string_pretty(&state.to_json())?
    );
    Ok(())
}
