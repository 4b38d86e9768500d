//! A run drawn as a timeline: `aegis::render::timeline` turns a thread's
//! waypoints into one self-contained HTML page (an inline SVG, no script).
//!
//! The graph has something of every kind to draw: a node that fails twice
//! and is retried, one whose first attempt is cut by its run timeout, a
//! cached lookup, a planner that musters four research tasks (one fails
//! once and is retried), and a Paladin whose primary provider answers 503 so
//! the fallback chain hops to the backup. A first thread warms the cache;
//! the page draws the second, where the lookup is a cache hit. Every wait
//! is a few tens of milliseconds of real time.
//!
//! ```text
//! cargo run --example run_timeline
//! ```
//!
//! It writes `aegis-timeline.html` into the current directory and prints its
//! path; open it in a browser and hover any bar for its details.

use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::LlmChunk;
use aegis::llm::{FallbackLlmAdapter, MockLlmAdapter};
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::CacheKeySpec;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use aegis::render::Timeline;
use aegis::trace::CollectingTraceSink;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const THREADS: [&str; 2] = ["warm-up", "briefing-42"];

fn field(name: &str, rule: DispatchRule) -> Result<FieldSpec, Box<dyn std::error::Error>> {
    Ok(FieldSpec::new(FieldName::new(name)?, rule, None, false))
}

fn delta(field: &str, value: serde_json::Value) -> Result<StateDelta, StateNodeError> {
    let mut d = StateDelta::new();
    d.set(field, value)?;
    Ok(d)
}

/// Two providers: the primary is overloaded (503 after 40 ms) on every
/// call, the backup streams its answer.
fn chain(hops: Arc<CollectingTraceSink>) -> Result<FallbackLlmAdapter, Box<dyn std::error::Error>> {
    let mut primary = MockLlmAdapter::new().with_provider_name("primary");
    let mut backup = MockLlmAdapter::new().with_provider_name("backup");
    for _ in THREADS {
        primary =
            primary
                .with_delay(Duration::from_millis(40))
                .with_error(LlmError::ProviderError {
                    provider: "primary".to_string(),
                    status: 503,
                    message: "upstream overloaded".to_string(),
                    retry_after: None,
                });
        backup = backup.with_stream_every(
            Duration::from_millis(25),
            vec![
                Ok(LlmChunk::text("Retries, a timeout, ")),
                Ok(LlmChunk::text("a hop and a cache hit, ")),
                Ok(LlmChunk::text("all on one page.")),
            ],
        );
    }
    Ok(FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)])?.with_trace_sink(hops))
}

fn graph() -> Result<WarGraph, Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(vec![
        field("topic", DispatchRule::LastWrite)?,
        field("source", DispatchRule::LastWrite)?,
        field("glossary", DispatchRule::LastWrite)?,
        field("slow", DispatchRule::LastWrite)?,
        field("notes", DispatchRule::Append)?,
        field("answer", DispatchRule::LastWrite)?,
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    let retry = |max_attempts, initial_ms| {
        RetryPolicy::default()
            .with_max_attempts(max_attempts)
            .with_initial_interval(Duration::from_millis(initial_ms))
            .with_backoff_factor(2.0)
            .with_max_interval(Duration::from_secs(1))
            .with_jitter(false)
            .with_retry_on(RetryPredicate::TransientOnly)
    };
    graph
        // Fails twice (transient), then succeeds.
        .add_node(
            "fetch",
            NodeSpec::from_fn("fetch", |_, ctx| {
                let attempt = ctx.attempt();
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    if attempt < 3 {
                        return Err(StateNodeError::transient(format!(
                            "source returned 503 on attempt {attempt}"
                        )));
                    }
                    Ok(delta("source", json!("fetched"))?.into())
                })
            }),
        )
        // A lookup whose result is cached by the topic alone.
        .add_node(
            "lookup",
            NodeSpec::from_fn("lookup", |_, _| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    Ok(delta("glossary", json!("terms"))?.into())
                })
            }),
        )
        // The first attempt hangs past its 80 ms run timeout.
        .add_node(
            "slow",
            NodeSpec::from_fn("slow", |_, ctx| {
                let attempt = ctx.attempt();
                Box::pin(async move {
                    let took = if attempt == 1 { 500 } else { 40 };
                    tokio::time::sleep(Duration::from_millis(took)).await;
                    Ok(delta("slow", json!("done"))?.into())
                })
            }),
        )
        .add_node(
            "plan",
            NodeSpec::from_fn("plan", |_, _| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let tasks = ["pricing", "risks", "rivals", "timeline"]
                        .into_iter()
                        .map(|q| (q.to_string(), json!({ "question": q })));
                    Ok(Directive::muster(StateDelta::new(), "research", tasks))
                })
            }),
        )
        // One task per question; `risks` fails once and is retried.
        .add_worker_template(
            "research",
            NodeSpec::from_fn("research", |_, ctx| {
                let attempt = ctx.attempt();
                let task = ctx.task().map(|t| t.task_key.clone()).unwrap_or_default();
                Box::pin(async move {
                    let took = 20 + 15 * task.len() as u64;
                    tokio::time::sleep(Duration::from_millis(took)).await;
                    if task == "risks" && attempt == 1 {
                        return Err(StateNodeError::transient("search index timed out"));
                    }
                    Ok(delta("notes", json!([task]))?.into())
                })
            }),
        )
        .add_node(
            "brief",
            NodeSpec::paladin(
                Paladin::new("Briefer")
                    .with_model("gpt-4o-mini")
                    .with_system_prompt("Summarise the notes in one sentence."),
                InputMapping::new("{topic}: {notes}"),
                FieldName::new("answer")?,
            ),
        )
        .add_edge(START, "fetch")
        .add_edge(START, "lookup")
        .add_edge(START, "slow")
        .add_edge("fetch", "plan")
        .add_edge("lookup", "plan")
        .add_edge("slow", "plan")
        .add_edge("research", "brief")
        .add_edge("brief", END)
        // Declared, so to_mermaid() draws the fan-out plan -.-> research.
        .declare_muster("plan", "research")
        .set_aegis("fetch", Aegis::new().with_retry(retry(4, 40)))
        .set_aegis(
            "lookup",
            Aegis::new().with_cache(CachePolicy::new(
                Duration::from_secs(15 * 60),
                CacheKeySpec::Fields(vec![FieldName::new("topic")?]),
            )),
        )
        .set_aegis(
            "slow",
            Aegis::new()
                .with_retry(retry(2, 20))
                .with_timeout(TimeoutPolicy::run(Duration::from_millis(80))),
        )
        .set_aegis("research", Aegis::new().with_retry(retry(3, 30)))
        .set_aegis(
            "brief",
            Aegis::new().with_retry(retry(2, 50)).with_timeout(
                TimeoutPolicy::run(Duration::from_secs(5))
                    .with_idle_timeout(Duration::from_secs(1)),
            ),
        );
    graph.validate()?;
    Ok(graph)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trace = CollectingTraceSink::new();
    let port = PaladinExecutionService::new(chain(trace.clone())?);
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone())
        .with_paladin_port(port)
        .with_node_cache(InMemoryNodeCache::new())
        .with_trace_sink(trace.clone());
    let graph = graph()?;

    for thread in THREADS {
        let state = engine
            .start(&graph, thread, json!({ "topic": "launch" }))
            .await?
            .into_result()?;
        println!(
            "[{thread}] answer: {}",
            state.get("answer").cloned().unwrap_or_default()
        );
    }

    let shown = THREADS[1];
    let waypoints = store.history(shown).await?;
    let events = trace.events();
    let page = Timeline::new(&waypoints).with_trace(&events).to_html();
    let path = std::env::current_dir()?.join("aegis-timeline.html");
    std::fs::write(&path, page)?;
    println!("{}", graph.to_mermaid());
    println!("timeline of `{shown}` written to {}", path.display());
    Ok(())
}
