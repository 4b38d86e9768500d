//! What an operator reads (issue 38, item 5): a fallback chain's hops in
//! the engine's `Events` stream, naming the node; the task key in every
//! per-task line (a mustered task's retry names `node[task]`); and one
//! place for the provider's name in every LLM error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::engine::RunStream;
use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::MockLlmAdapter;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

fn overloaded(provider: &str) -> LlmError {
    LlmError::ProviderError {
        provider: provider.to_string(),
        status: 503,
        message: "overloaded".to_string(),
        retry_after: None,
    }
}

async fn trace_events(mut stream: RunStream) -> Vec<TraceEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            StreamEvent::Trace(e) => events.push(e),
            StreamEvent::Finished(outcome) => {
                assert!(outcome.unwrap().is_completed());
                return events;
            }
            _ => {}
        }
    }
    panic!("no Finished event")
}

/// The hop comes in the stream, between the node's start and end, naming
/// the node — without a sink on the chain.
#[tokio::test(start_paused = true)]
async fn a_fallback_hop_is_in_the_events_stream_naming_its_node() {
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_error(overloaded("primary"));
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_response("fine");
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap();
    let engine = engine().with_llm(chain);
    let events = trace_events(engine.stream(&one_paladin(Aegis::new()), "t", json!({}))).await;
    let at = |wanted: fn(&TraceEvent) -> bool| events.iter().position(wanted);
    let hop = at(|e| {
        matches!(e, TraceEvent::FallbackHop { node_id: Some(n), from_provider, to_provider }
            if n.as_str() == "answer" && from_provider == "primary" && to_provider == "backup")
    })
    .unwrap_or_else(|| panic!("no hop in {events:#?}"));
    let started = at(|e| matches!(e, TraceEvent::NodeStarted { .. })).unwrap();
    let finished = at(|e| matches!(e, TraceEvent::NodeFinished { .. })).unwrap();
    assert!(started < hop && hop < finished, "{events:#?}");
}

/// A sink on both the chain and the engine sees each hop once (the
/// engine's, naming the node); the chain's own sinks still get it.
#[tokio::test(start_paused = true)]
async fn a_sink_on_both_the_chain_and_the_engine_sees_each_hop_once() {
    let (both, chain_only) = (CollectingTraceSink::new(), CollectingTraceSink::new());
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_error(overloaded("primary"));
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_response("fine");
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)])
        .unwrap()
        .with_trace_sink(both.clone())
        .with_trace_sink(chain_only.clone());
    let engine = engine().with_llm(chain).with_trace_sink(both.clone());
    run_to_state(&engine, &one_paladin(Aegis::new()), "t", json!({})).await;
    let hops = |sink: &CollectingTraceSink| {
        sink.events()
            .into_iter()
            .filter_map(|e| match e {
                TraceEvent::FallbackHop { node_id, .. } => Some(node_id.map(|n| n.to_string())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(hops(&both), vec![Some("answer".to_string())]);
    assert_eq!(hops(&chain_only), vec![None]);
}

/// `plan` musters tasks `t01` and `t02` to `classify`; `t01` fails once.
fn mustered_retry() -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("labels", DispatchRule::Append)]),
        EngineLimits::default(),
    );
    g.add_node(
        "plan",
        NodeSpec::from_fn("plan", |_, _| {
            Box::pin(async {
                let tasks = ["t01", "t02"].map(|k| (k.to_string(), json!(k)));
                Ok(Directive::muster(StateDelta::new(), "classify", tasks))
            })
        }),
    )
    .add_worker_template(
        "classify",
        NodeSpec::from_fn("classify", |_, ctx| {
            let attempt = ctx.attempt();
            let task = ctx.task().map(|t| t.task_key.clone()).unwrap_or_default();
            Box::pin(async move {
                if task == "t01" && attempt == 1 {
                    return Err(StateNodeError::transient("index busy"));
                }
                Ok(delta(&[("labels", json!([task]))]).into())
            })
        }),
    )
    .add_edge(START, "plan")
    .add_edge("classify", END)
    .set_aegis(
        "classify",
        Aegis::new().with_retry(
            RetryPolicy::default()
                .with_max_attempts(2)
                .with_initial_interval(Duration::from_millis(100))
                .with_jitter(false),
        ),
    );
    g
}

/// Issue 38: `classify retries, attempt 2 in 100ms` right after
/// `classify[t01]` failed left the reader guessing which task retried.
#[tokio::test(start_paused = true)]
async fn a_mustered_tasks_retry_line_names_the_task() {
    let sink = CollectingTraceSink::new();
    let engine = engine().with_trace_sink(sink.clone());
    run_to_state(&engine, &mustered_retry(), "t", json!({})).await;
    let lines: Vec<String> = sink.events().iter().map(ToString::to_string).collect();
    let failed = lines
        .iter()
        .position(|l| l.contains("classify[t01] attempt 1 failed"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    let retry = lines
        .iter()
        .position(|l| l == "[t] superstep 2: classify[t01] retries, attempt 2 in 100ms")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(failed < retry);
    assert!(
        sink.events().iter().any(|e| matches!(e,
            TraceEvent::TaskRetryScheduled { task_key, attempt: 2, .. } if task_key == "t01")),
        "typed too"
    );
}

/// Issue 38: `llm (HTTP 401): authentication failed: p1: ...` beside
/// `llm p2 (HTTP 500): ...`: the provider now always comes first, once.
#[tokio::test(start_paused = true)]
async fn every_llm_error_of_a_node_names_its_provider_in_one_place() {
    use aegis::error::KnownSecrets;
    let secrets = KnownSecrets::default();
    for (status, expected) in [
        (401, "llm: p1: authentication failed: bad key"),
        (500, "llm: p1: HTTP 500: bad key"),
    ] {
        let error = secrets.map_http_status("p1", status, "bad key", &[]);
        let lone = MockLlmAdapter::new()
            .with_provider_name("p1")
            .with_error(error);
        let outcome = engine()
            .with_llm(lone)
            .start(&one_paladin(Aegis::new()), "t", json!({}))
            .await
            .unwrap();
        let error = outcome.node_error().expect("the node failed");
        assert_eq!(error.source.to_string(), expected);
    }
}
