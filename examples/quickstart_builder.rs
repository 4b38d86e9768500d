//! The quickstart's graph through the builder API, which is what `#[aegis]`
//! and `graph!` write: nodes as `StateNode` structs and a closure, the schema
//! as `FieldSpec`s, the Aegis as a struct beside the graph. A fan-out to two
//! nodes, a join, a conditional edge, one flaky node under a retry policy,
//! and the trace collected, then printed.
//!
//! Run it with `cargo run --example quickstart_builder`.

use aegis::engine::EdgeConditionEvaluator;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Splits the question into two research angles.
struct Plan;

#[async_trait]
impl StateNode for Plan {
    fn kind_name(&self) -> &str {
        "plan"
    }

    async fn run(&self, state: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        let topic = state
            .get("topic")
            .and_then(|v| v.as_str())
            .unwrap_or("nothing");
        let mut delta = StateDelta::new();
        delta.set("notes", vec![format!("plan: research {topic}")])?;
        Ok(delta.into())
    }
}

/// A research step whose upstream fails transiently the first time.
struct Research {
    angle: &'static str,
    calls: AtomicU32,
}

#[async_trait]
impl StateNode for Research {
    fn kind_name(&self) -> &str {
        "research"
    }

    async fn run(&self, _: &Battlefield, ctx: &NodeContext) -> Result<Directive, StateNodeError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 && self.angle == "history" {
            return Err(StateNodeError::transient("archive returned 503"));
        }
        let mut delta = StateDelta::new();
        delta
            .set(
                "notes",
                format!(
                    "{}: found 3 sources (attempt {})",
                    self.angle,
                    ctx.attempt()
                ),
            )?
            .set("sources", 3)?;
        Ok(delta.into())
    }
}

/// Writes the answer from everything gathered.
struct Summarize;

#[async_trait]
impl StateNode for Summarize {
    fn kind_name(&self) -> &str {
        "summarize"
    }

    async fn run(&self, state: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        let sources = state.get("sources").and_then(|v| v.as_i64()).unwrap_or(0);
        let mut delta = StateDelta::new();
        delta.set("answer", format!("summary built on {sources} sources"))?;
        Ok(delta.into())
    }
}

/// Routes to a review below 10 sources, else straight to the end.
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

fn field(name: &str, rule: DispatchRule) -> Result<FieldSpec, Box<dyn std::error::Error>> {
    Ok(FieldSpec::new(FieldName::new(name)?, rule, None, false))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(vec![
        field("topic", DispatchRule::LastWrite)?,
        field("notes", DispatchRule::Append)?,
        field("sources", DispatchRule::Sum)?,
        field("answer", DispatchRule::LastWrite)?,
        field("reviewed", DispatchRule::LastWrite)?,
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node("plan", NodeSpec::function(Plan))
        .add_node(
            "history",
            NodeSpec::function(Research {
                angle: "history",
                calls: AtomicU32::new(0),
            }),
        )
        .add_node(
            "science",
            NodeSpec::function(Research {
                angle: "science",
                calls: AtomicU32::new(0),
            }),
        )
        .add_node("summarize", NodeSpec::function(Summarize))
        .add_node(
            "review",
            NodeSpec::from_fn("review", |_, _| {
                Box::pin(async {
                    let mut delta = StateDelta::new();
                    delta.set("reviewed", true)?;
                    Ok(delta.into())
                })
            }),
        )
        .add_edge(START, "plan")
        .add_edge("plan", "history")
        .add_edge("plan", "science")
        .add_edge("history", "summarize")
        .add_edge("science", "summarize")
        .add_conditional_edges("summarize", "enough-sources", ["review", END])
        .add_edge("review", END);
    // Research talks to flaky upstreams: retry transient failures, 50 ms apart.
    let research = Aegis::new()
        .with_retry(
            RetryPolicy::default()
                .with_initial_interval(Duration::from_millis(50))
                .with_jitter(false),
        )
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(10)));
    graph
        .set_aegis("history", research.clone())
        .set_aegis("science", research);

    println!("The graph, as Mermaid:\n{}", graph.to_mermaid());

    let trace = CollectingTraceSink::new();
    let engine = WarEngine::in_memory()
        .with_edge_evaluator("enough-sources", Arc::new(EnoughSources))
        .with_trace_sink(trace.clone());
    let outcome = engine
        .start(&graph, "quickstart", json!({ "topic": "tea" }))
        .await?;

    println!("Trace:");
    for event in trace.events() {
        if !matches!(event, TraceEvent::NodeStarted { .. }) {
            println!("  {event}");
        }
    }
    let state = outcome.into_result()?;
    println!(
        "Final state:\n{}",
        serde_json::to_string_pretty(&state.to_json())?
    );
    Ok(())
}
