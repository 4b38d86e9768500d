//! The guide's "attach an Aegis" graph, declared with the DSL, as Function
//! nodes: a graph-wide default (three attempts, a 30 s wall clock per
//! attempt) and `writer`'s own Aegis, which wins wholesale — it retries up to
//! five times and, setting no `timeout`, has no per-attempt bound at all.
//! A conditional edge sends the draft back until the reviewer approves.
//!
//! Run: `cargo run --example dsl_graph`

use aegis::engine::EdgeConditionEvaluator;
use aegis::prelude::*;
use aegis::trace::AttemptStatus;
use aegis::trace::TraceEvent;
use aegis::trace::TraceSink;
use serde_json::json;
use std::sync::Arc;

/// Drafts a reply; its first attempt hits a transient failure.
#[aegis(retry(max = 5, initial = "50ms", jitter = false))]
async fn writer(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    if ctx.attempt() == 1 {
        return Err(StateNodeError::transient("model overloaded"));
    }
    let version = state.get("version").and_then(|v| v.as_u64()).unwrap_or(0) + 1;
    let mut delta = StateDelta::new();
    delta
        .set("draft", format!("Dear customer, ... (draft {version})"))?
        .set("version", 1)?;
    Ok(delta)
}

/// Reviews the draft: only the second one is good enough.
#[aegis]
async fn reviewer(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    ctx.heartbeat();
    let version = state.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    let verdict = if version >= 2 { "approved" } else { "revise" };
    let mut delta = StateDelta::new();
    delta.set("review", verdict)?;
    Ok(delta)
}

/// The evaluator the conditional edge names.
struct Verdict;

#[async_trait]
impl EdgeConditionEvaluator for Verdict {
    async fn evaluate(&self, state: &Battlefield) -> Result<Vec<NodeId>, StateNodeError> {
        let approved = state.get("review") == Some(&json!("approved"));
        Ok(vec![NodeId::new(if approved { END } else { "writer" })])
    }
}

struct PrintAttempts;

impl TraceSink for PrintAttempts {
    fn emit(&self, event: TraceEvent) {
        match event {
            TraceEvent::NodeFinished {
                node_id,
                attempt,
                status,
                ..
            } => match status {
                AttemptStatus::Succeeded => println!("  {node_id} attempt {attempt}: ok"),
                AttemptStatus::Failed(e) => println!("  {node_id} attempt {attempt}: {e}"),
                AttemptStatus::Skipped { reason } => {
                    println!("  {node_id} attempt {attempt}: skipped ({reason})");
                }
                other => println!("  {node_id} attempt {attempt}: {other:?}"),
            },
            TraceEvent::RetryScheduled {
                node_id,
                attempt,
                delay,
                ..
            } => println!("  {node_id}: attempt {attempt} in {delay:?}"),
            _ => {}
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = graph! {
        schema {
            draft: LastWrite,
            review: LastWrite,
            version: Sum = 0,
        }
        nodes { writer, reviewer }
        default_aegis { retry, timeout(run = "30s") }
        edges {
            START -> writer -> reviewer;
            reviewer ?> "verdict" -> [writer, END];
        }
    };
    for id in ["writer", "reviewer"] {
        println!("{id}: {:?}", graph.aegis_for(&NodeId::new(id)));
    }
    println!("\n{}", graph.to_mermaid());

    let engine = WarEngine::in_memory()
        .with_edge_evaluator("verdict", Arc::new(Verdict))
        .with_trace_sink(PrintAttempts);
    println!("running:");
    let state = engine
        .start(&graph, "reply-1", json!({}))
        .await?
        .into_result()?;
    for field in ["draft", "review", "version"] {
        let value = state
            .get(field)
            .map_or_else(|| "(unset)".into(), ToString::to_string);
        println!("{field} = {value}");
    }
    Ok(())
}
