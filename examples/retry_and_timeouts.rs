//! Retry and timeouts: a flaky node that fails transiently twice and then
//! succeeds; a streaming-style node that beats its heartbeat and outlives a
//! short idle timeout; and a stalled node that the idle timeout cuts.
//!
//! Run it with `cargo run --example retry_and_timeouts`.

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use serde_json::json;
use std::time::Duration;

/// Fails with a transient error on attempts 1 and 2.
struct Flaky;

#[async_trait]
impl StateNode for Flaky {
    fn kind_name(&self) -> &str {
        "flaky"
    }

    async fn run(&self, _: &Battlefield, ctx: &NodeContext) -> Result<Directive, StateNodeError> {
        if ctx.attempt() < 3 {
            return Err(StateNodeError::transient(format!(
                "upstream 503 on attempt {}",
                ctx.attempt()
            )));
        }
        let mut delta = StateDelta::new();
        delta.set("flaky", format!("succeeded on attempt {}", ctx.attempt()))?;
        Ok(delta.into())
    }
}

/// Emits ten "chunks" 30 ms apart, beating after each: 300 ms of work under
/// a 100 ms idle window.
struct Streaming;

#[async_trait]
impl StateNode for Streaming {
    fn kind_name(&self) -> &str {
        "streaming"
    }

    async fn run(&self, _: &Battlefield, ctx: &NodeContext) -> Result<Directive, StateNodeError> {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(30)).await;
            ctx.heartbeat();
        }
        let mut delta = StateDelta::new();
        delta.set("streaming", "10 chunks")?;
        Ok(delta.into())
    }
}

/// Beats twice, then goes silent.
struct Stalled;

#[async_trait]
impl StateNode for Stalled {
    fn kind_name(&self) -> &str {
        "stalled"
    }

    async fn run(&self, _: &Battlefield, ctx: &NodeContext) -> Result<Directive, StateNodeError> {
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(30)).await;
            ctx.heartbeat();
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(StateDelta::new().into())
    }
}

fn graph(node: NodeSpec, aegis: Aegis) -> Result<WarGraph, Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(
        ["flaky", "streaming"]
            .into_iter()
            .map(|f| {
                Ok(FieldSpec::new(
                    FieldName::new(f)?,
                    DispatchRule::LastWrite,
                    None,
                    false,
                ))
            })
            .collect::<Result<Vec<_>, aegis::state::StateError>>()?,
    );
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node("node", node)
        .add_edge(START, "node")
        .add_edge("node", END);
    g.set_aegis("node", aegis);
    Ok(g)
}

async fn run(title: &str, g: &WarGraph) -> Result<(), Box<dyn std::error::Error>> {
    let trace = CollectingTraceSink::new();
    let engine = WarEngine::in_memory().with_trace_sink(trace.clone());
    let started = std::time::Instant::now();
    let outcome = engine.start(g, title, json!({})).await?;
    println!("== {title}");
    for event in trace.events() {
        match event {
            TraceEvent::NodeFinished {
                attempt,
                status,
                duration,
                ..
            } => {
                println!("  attempt {attempt}: {status:?} after {duration:?}");
            }
            TraceEvent::RetryScheduled { attempt, delay, .. } => {
                println!("  waiting {delay:?} before attempt {attempt}");
            }
            _ => {}
        }
    }
    match outcome.node_error() {
        Some(e) => println!("  -> failed: {e}"),
        None => println!("  -> {}: {}", outcome.name(), outcome.state().to_json()),
    }
    println!("  ({:?} wall clock)\n", started.elapsed());
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let retry = Aegis::new().with_retry(
        RetryPolicy::default()
            .with_initial_interval(Duration::from_millis(50))
            .with_jitter(false),
    );
    run(
        "flaky node, three attempts, 50 ms then 100 ms apart",
        &graph(NodeSpec::function(Flaky), retry)?,
    )
    .await?;

    let idle = Aegis::new().with_timeout(
        TimeoutPolicy::run(Duration::from_secs(5)).with_idle_timeout(Duration::from_millis(100)),
    );
    run(
        "streaming node beating every 30 ms under a 100 ms idle timeout",
        &graph(NodeSpec::function(Streaming), idle.clone())?,
    )
    .await?;
    run(
        "stalled node cut 100 ms after its last beat",
        &graph(NodeSpec::function(Stalled), idle)?,
    )
    .await?;
    Ok(())
}
