//! Retry-After as an opt-in floor: a provider's typed `retry-after` hint
//! travels from the HTTP adapter through `PaladinError` to the node's
//! `NodeError`, and with `respect_retry_after` the wait before the next
//! attempt is `max(backoff, min(hint, max_retry_after))`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::PaladinError;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::OpenAiCompatibleLlmAdapter;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::DEFAULT_MAX_RETRY_AFTER;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::*;
use support::http_server::{Reply, TestServer};
use tokio::time::Instant;

fn ok_reply() -> Value {
    json!({
        "id": "c1", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
}

fn rate_limited(retry_after: &str) -> Reply {
    Reply::body(429, "slow down").header("retry-after", retry_after)
}

/// A Paladin node over an OpenAI-compatible adapter at `server`, retried
/// by `policy`, on an engine whose records can be read back.
fn paladin_run(server: &TestServer, policy: RetryPolicy) -> (WarEngine, WarGraph) {
    let adapter = OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_api_key("sk-test-0123456789abcdefghij");
    let port = PaladinExecutionService::new(adapter).with_streaming(false);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);
    let answer = field_name("answer");
    let mut g = WarGraph::new(
        BattlefieldSchema::new(vec![field("answer", DispatchRule::LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("hi"),
            answer,
        ),
    )
    .add_edge(START, "writer")
    .add_edge("writer", END)
    .set_aegis("writer", Aegis::new().with_retry(policy));
    (engine, g)
}

/// Two attempts, an exact 500 ms backoff.
fn exact() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(2)
        .with_jitter(false)
}

fn floored(max_retry_after: Duration) -> RetryPolicy {
    exact()
        .with_respect_retry_after(true)
        .with_max_retry_after(max_retry_after)
}

/// Runs the node against a 429 carrying `retry_after`, then a 200; returns
/// how long the run took.
async fn time_after_429(retry_after: &str, policy: RetryPolicy) -> Duration {
    time_after(rate_limited(retry_after), policy).await
}

/// Runs the node against `first`, then a 200; returns how long the run took.
async fn time_after(first: Reply, policy: RetryPolicy) -> Duration {
    let server = TestServer::start(vec![first, Reply::json(200, &ok_reply())]).await;
    let (engine, g) = paladin_run(&server, policy);
    let t0 = Instant::now();
    let state = run_to_state(&engine, &g, "t", json!({})).await;
    let took = t0.elapsed();
    assert_eq!(state.get("answer"), Some(&json!("done")));
    assert_eq!(server.requests().len(), 2);
    // The failed attempt's error carries the hint as a typed field.
    let rec = records(&engine, "t").await;
    assert_eq!(rec[0].attempts[0].error.transience, Transience::Transient);
    assert!(rec[0].attempts[0].error.retry_after.is_some());
    took
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_30_waits_exactly_30s_with_the_floor_on() {
    let took = time_after_429("30", floored(Duration::from_secs(60))).await;
    assert_eq!(took, Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_30_waits_exactly_30s_with_the_floor_on() {
    // Not only a 429: any status that sends the header carries the hint.
    let unavailable = || Reply::body(503, "overloaded").header("retry-after", "30");
    let took = time_after(unavailable(), floored(Duration::from_secs(60))).await;
    assert_eq!(took, Duration::from_secs(30));
    let took = time_after(unavailable(), exact()).await;
    assert_eq!(took, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn with_the_floor_off_the_plain_backoff_is_waited() {
    let policy = exact();
    assert!(!policy.respect_retry_after, "off by default");
    let took = time_after_429("30", policy).await;
    assert_eq!(took, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_hint_beyond_the_cap_waits_the_cap() {
    // A hostile day-long hint waits the 45 s cap, no more.
    let took = time_after_429("86400", floored(Duration::from_secs(45))).await;
    assert_eq!(took, Duration::from_secs(45));
    // The default cap is 60 s.
    assert_eq!(
        RetryPolicy::default().max_retry_after,
        Duration::from_secs(60)
    );
    assert_eq!(DEFAULT_MAX_RETRY_AFTER, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_hint_shorter_than_the_backoff_never_shortens_it() {
    let policy = (floored(Duration::from_secs(60))).with_initial_interval(Duration::from_secs(5));
    let took = time_after_429("1", policy).await;
    assert_eq!(took, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_floor_past_the_run_budget_is_skipped_for_budget() {
    let server = TestServer::start(vec![rate_limited("30")]).await;
    let (engine, mut g) = paladin_run(&server, floored(Duration::from_secs(60)));
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(20)));
    let sink = CollectingTraceSink::new();
    let engine = engine.with_trace_sink(sink.clone());
    let t0 = Instant::now();
    let out = engine.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::ZERO);
    let err = out.node_error().unwrap();
    assert_eq!(err.retry_after, Some(Duration::from_secs(30)));
    assert!(sink.events().iter().any(|e| matches!(
        e,
        TraceEvent::RetrySkipped { wait, remaining, .. }
            if *wait == Duration::from_secs(30) && *remaining == Duration::from_secs(20)
    )));
}

#[tokio::test(start_paused = true)]
async fn a_function_node_keeps_the_hint_through_the_question_mark() {
    // `?` on an LlmError keeps the hint; a node may also set one itself.
    let node = NodeSpec::from_fn("calls", |_, ctx| {
        let attempt = ctx.attempt();
        Box::pin(async move {
            if attempt == 1 {
                let e = LlmError::RateLimited {
                    retry_after: Some(Duration::from_secs(7)),
                };
                Err(StateNodeError::from(e))
            } else if attempt == 2 {
                Err(StateNodeError::transient("busy")
                    .with_retry_after(Some(Duration::from_secs(3))))
            } else {
                Ok(delta(&[("out", json!(attempt))]).into())
            }
        })
    });
    let mut g = chain(
        schema(&[("out", DispatchRule::LastWrite)]),
        vec![("n", node)],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_retry((floored(Duration::from_secs(60))).with_max_attempts(3)),
    );
    let t0 = Instant::now();
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!(3)));
    // 7 s (hint over 500 ms), then 3 s (hint over 1 s).
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
}

#[test]
fn the_hint_travels_typed_through_paladin_and_node_errors() {
    let hint = Some(Duration::from_secs(12));
    let llm = LlmError::RateLimited { retry_after: hint };
    assert_eq!(llm.retry_after(), hint);
    let chain = LlmError::AllProvidersFailed {
        attempts: vec![],
        last: Box::new(llm.clone()),
    };
    assert_eq!(chain.retry_after(), hint);
    let unavailable = LlmError::ProviderError {
        provider: "p".into(),
        status: 503,
        message: "overloaded".into(),
        retry_after: hint,
    };
    assert_eq!(unavailable.retry_after(), hint);
    assert_eq!(PaladinError::from(unavailable).retry_after(), hint);
    let paladin = PaladinError::from(llm);
    assert_eq!(paladin.retry_after(), hint);
    assert_eq!(StateNodeError::from(paladin).retry_after, hint);
    assert_eq!(
        PaladinError::ExecutionError("retry after 12s".into()).retry_after(),
        None,
        "never parsed from a message"
    );
    // An error without a hint serialises as it always did.
    let e = NodeError::new(
        NodeId::new("n"),
        1,
        Transience::Transient,
        NodeErrorSource::Cancelled,
    );
    let v = serde_json::to_value(&e).unwrap();
    assert!(v.get("retry_after").is_none());
    let back: NodeError = serde_json::from_value(v).unwrap();
    assert_eq!(back.retry_after, None);
}

#[tokio::test]
async fn a_zero_cap_with_the_floor_on_is_rejected_before_a_node_runs() {
    let runs = counter();
    let mut g = chain(
        schema(&[("n", DispatchRule::Sum)]),
        vec![("a", bump("n", runs.clone()))],
    );
    g.set_aegis("a", Aegis::new().with_retry(floored(Duration::ZERO)));
    let err = engine().start(&g, "t", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::RetryPolicyInvalid { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("max_retry_after is zero"), "{err}");
    assert_eq!(count(&runs), 0);
    // A zero cap with the floor off is harmless: never read.
    g.set_aegis(
        "a",
        Aegis::new().with_retry(exact().with_max_retry_after(Duration::ZERO)),
    );
    engine().start(&g, "t2", json!({})).await.unwrap();
}
