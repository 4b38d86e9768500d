//! Budget-aware retry: a retry whose wait would end at or after the run
//! budget or an enclosing deadline (a Battalion's timeout) is not begun; the
//! node fails at once, its handler runs, and the trace and record say why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::CircuitBreaker;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::trace::BudgetBound;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::NodeExecutionRecord;
use aegis::waypoint::NodeStatus;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;
use tokio::time::Instant;

fn exact(max_attempts: u32, initial: Duration) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_initial_interval(initial)
        .with_jitter(false)
}

/// `n` fails transiently once under `retry`, routing its final failure to
/// `compensate`; the run budget is `budget`.
fn routed(retry: RetryPolicy, budget: Duration) -> WarGraph {
    let mut g = chain(
        schema(&[("path", Append), ("err", Merge)]),
        vec![("n", flaky(1, Transience::Transient, counter(), "path"))],
    );
    g.add_node("compensate", write("path", json!("compensated")))
        .add_edge("compensate", END)
        .set_aegis(
            "n",
            Aegis::new()
                .with_retry(retry)
                .with_on_error(ErrorHandlerSpec::Route {
                    to: NodeId::new("compensate"),
                    error_field: field_name("err"),
                }),
        );
    g.set_limits(EngineLimits::default().with_run_timeout(budget));
    g
}

fn skips(sink: &CollectingTraceSink) -> Vec<TraceEvent> {
    sink.events()
        .into_iter()
        .filter(|e| matches!(e, TraceEvent::RetrySkipped { .. }))
        .collect()
}

/// `START -> squad -> END`: a Battalion running `child` (its `out` mapped
/// to `result`) under a 2 s run timeout, the child's enclosing deadline.
fn squad(child: WarGraph) -> WarGraph {
    let mut g = chain(
        schema(&[("result", LastWrite)]),
        vec![(
            "squad",
            NodeSpec::battalion(
                child,
                vec![],
                vec![(field_name("out"), field_name("result"))],
            ),
        )],
    );
    g.set_aegis(
        "squad",
        Aegis::new().with_timeout(TimeoutPolicy::run(Duration::from_secs(2))),
    );
    g
}

#[tokio::test(start_paused = true)]
async fn a_backoff_past_the_run_budget_is_skipped_and_the_handler_runs_at_once() {
    let sink = CollectingTraceSink::new();
    let e = engine().with_trace_sink(sink.clone());
    let g = routed(exact(3, Duration::from_secs(30)), Duration::from_secs(10));
    let t0 = Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    // No 10 s spent sleeping towards the budget: the handler ran at once.
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(state.get("path"), Some(&json!(["compensated"])));
    assert_eq!(state.get("err").unwrap()["attempt"], json!(1));

    let skipped = skips(&sink);
    assert_eq!(
        skipped,
        [TraceEvent::RetrySkipped {
            thread_id: "t".into(),
            superstep: 1,
            node_id: NodeId::new("n"),
            task_key: None,
            attempt: 2,
            wait: Duration::from_secs(30),
            remaining: Duration::from_secs(10),
            bound: BudgetBound::RunBudget,
        }]
    );
    assert!(
        !sink
            .events()
            .iter()
            .any(|e| matches!(e, TraceEvent::RetryScheduled { .. })),
        "nothing was scheduled"
    );
    assert_eq!(
        skipped[0].to_string(),
        "[t] superstep 1: n does not retry: attempt 2 would wait 30s, 10s left of the run budget"
    );

    let rec = records(&e, "t").await;
    let n = rec.iter().find(|r| r.node_id.as_str() == "n").unwrap();
    assert_eq!(n.status, NodeStatus::Failed);
    assert_eq!(n.attempt, 1);
    let skip = n.retry_skipped.expect("a skipped retry");
    assert_eq!(
        (skip.attempt, skip.wait_ms, skip.remaining_ms, skip.bound),
        (2, 30_000, 10_000, BudgetBound::RunBudget)
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_ending_exactly_at_the_budget_is_skipped_and_a_shorter_one_is_not() {
    // 10 s of backoff in a 10 s budget leaves no time for the attempt.
    let sink = CollectingTraceSink::new();
    let e = engine().with_trace_sink(sink.clone());
    let g = routed(exact(3, Duration::from_secs(10)), Duration::from_secs(10));
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(state.get("path"), Some(&json!(["compensated"])));
    assert_eq!(skips(&sink).len(), 1);

    // 9.999 s fits: the retry runs and succeeds.
    let sink = CollectingTraceSink::new();
    let e = engine().with_trace_sink(sink.clone());
    let g = routed(
        exact(3, Duration::from_millis(9_999)),
        Duration::from_secs(10),
    );
    let t0 = Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(t0.elapsed(), Duration::from_millis(9_999));
    assert_eq!(state.get("path"), Some(&json!(["ok"])));
    assert!(skips(&sink).is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_a_handler_the_node_fails_at_once_with_its_last_error() {
    let mut g = chain(
        schema(&[("out", LastWrite)]),
        vec![("n", flaky(5, Transience::Transient, counter(), "out"))],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_retry(exact(5, Duration::from_secs(2))),
    );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(5)));
    let e = engine();
    let t0 = Instant::now();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    // Attempt 2 after 2 s fits; attempt 3 would wait 4 s with 3 s left.
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    let err = out.node_error().unwrap();
    assert_eq!(err.attempt, 2);
    assert_eq!(
        err.source,
        NodeErrorSource::Function {
            message: "failure 2".into()
        }
    );
    let rec = records(&e, "t").await;
    assert_eq!(
        rec[0]
            .retry_skipped
            .map(|s| (s.attempt, s.wait_ms, s.remaining_ms)),
        Some((3, 4_000, 3_000))
    );
}

#[tokio::test(start_paused = true)]
async fn a_battalions_timeout_is_its_childs_enclosing_deadline() {
    // The child's node would back off 5 s; its Battalion may run 2 s.
    let mut child = chain(
        schema(&[("out", LastWrite)]),
        vec![("inner", flaky(1, Transience::Transient, counter(), "out"))],
    );
    child.set_aegis(
        "inner",
        Aegis::new()
            .with_retry(exact(3, Duration::from_secs(5)))
            .with_on_error(ErrorHandlerSpec::Absorb {
                fallback_delta: delta(&[("out", json!("absorbed"))]),
            }),
    );
    let g = squad(child);
    let sink = CollectingTraceSink::new();
    let e = engine().with_trace_sink(sink.clone());
    let t0 = Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(state.get("result"), Some(&json!("absorbed")));
    let skipped = skips(&sink);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let TraceEvent::RetrySkipped {
        thread_id,
        node_id,
        attempt,
        wait,
        remaining,
        bound,
        ..
    } = &skipped[0]
    else {
        unreachable!()
    };
    assert_ne!(thread_id, "t", "the child's own thread");
    assert_eq!(node_id.as_str(), "inner");
    assert_eq!(*attempt, 2);
    assert_eq!(*wait, Duration::from_secs(5));
    assert_eq!(*remaining, Duration::from_secs(2));
    assert_eq!(*bound, BudgetBound::EnclosingDeadline);
}

#[tokio::test(start_paused = true)]
async fn a_child_within_its_enclosing_deadline_retries_as_usual() {
    let mut child = chain(
        schema(&[("out", LastWrite)]),
        vec![("inner", flaky(1, Transience::Transient, counter(), "out"))],
    );
    child.set_aegis(
        "inner",
        Aegis::new().with_retry(exact(3, Duration::from_secs(1))),
    );
    let g = squad(child);
    let t0 = Instant::now();
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(state.get("result"), Some(&json!("ok")));
}

#[test]
fn records_without_the_field_still_decode() {
    let old = json!({
        "node_id": "n", "task_key": null, "status": "Failed", "attempt": 1,
        "attempts": [], "cache_hit": false,
        "started_at": {"secs_since_epoch": 0, "nanos_since_epoch": 0},
        "duration_ms": 0
    });
    let rec: NodeExecutionRecord = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(rec.retry_skipped, None);
    // And a record without a skip writes the same bytes as before.
    assert_eq!(serde_json::to_value(&rec).unwrap(), old);
}

/// A Paladin node whose chain is two breakers, both open (for 40 s and
/// 30 s), under a Retry-After floor; its final failure routes to
/// `compensate`.
async fn all_open_chain(budget: Option<Duration>) -> (WarEngine, WarGraph, MockLlmAdapter) {
    let overloaded = |p: &str| LlmError::ProviderError {
        provider: p.into(),
        status: 503,
        message: "overloaded".into(),
        retry_after: None,
    };
    let a = MockLlmAdapter::new()
        .with_provider_name("a")
        .with_error(overloaded("a"));
    let b = MockLlmAdapter::new()
        .with_provider_name("b")
        .with_error(overloaded("b"))
        .with_response("recovered");
    let ca = CircuitBreaker::new(a.clone())
        .with_failure_threshold(1)
        .with_cool_down(Duration::from_secs(40));
    let cb = CircuitBreaker::new(b.clone())
        .with_failure_threshold(1)
        .with_cool_down(Duration::from_secs(30));
    ca.generate(&LlmRequest::new("m", vec![]))
        .await
        .unwrap_err();
    cb.generate(&LlmRequest::new("m", vec![]))
        .await
        .unwrap_err();
    let chain = FallbackLlmAdapter::new(vec![Arc::new(ca), Arc::new(cb)]).unwrap();
    let port = PaladinExecutionService::new(chain).with_streaming(false);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);
    let mut g = chain_graph();
    g.set_aegis(
        "writer",
        Aegis::new()
            .with_retry((exact(2, Duration::from_millis(500))).with_respect_retry_after(true))
            .with_on_error(ErrorHandlerSpec::Route {
                to: NodeId::new("compensate"),
                error_field: field_name("err"),
            }),
    );
    g.set_limits(EngineLimits::default().with_run_timeout(budget));
    (engine, g, b)
}

fn chain_graph() -> WarGraph {
    let mut g = chain(
        schema(&[("answer", LastWrite), ("path", Append), ("err", Merge)]),
        vec![(
            "writer",
            NodeSpec::paladin(
                Paladin::new("Writer").with_model("m"),
                InputMapping::new("hi"),
                field_name("answer"),
            ),
        )],
    );
    g.add_node("compensate", write("path", json!("compensated")))
        .add_edge("compensate", END);
    g
}

#[tokio::test(start_paused = true)]
async fn a_chain_whose_circuits_stay_open_past_the_budget_is_not_retried() {
    let (engine, g, b) = all_open_chain(Some(Duration::from_secs(20))).await;
    let sink = CollectingTraceSink::new();
    let engine = engine.with_trace_sink(sink.clone());
    let t0 = Instant::now();
    let state = run_to_state(&engine, &g, "t", json!({})).await;
    // The soonest probe is 30 s away, past the 20 s budget: compensate now.
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(state.get("path"), Some(&json!(["compensated"])));
    assert_eq!(b.call_count(), 1, "no call reached an open provider");
    assert!(sink.events().iter().any(|e| matches!(
        e,
        TraceEvent::RetrySkipped { wait, remaining, .. }
            if *wait == Duration::from_secs(30) && *remaining == Duration::from_secs(20)
    )));
}

#[tokio::test(start_paused = true)]
async fn with_budget_enough_the_retry_waits_for_the_first_circuit_to_half_open() {
    let (engine, g, b) = all_open_chain(None).await;
    let t0 = Instant::now();
    let state = run_to_state(&engine, &g, "t", json!({})).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(30));
    assert_eq!(state.get("answer"), Some(&json!("recovered")));
    assert_eq!(b.call_count(), 2, "the probe went through");
}

#[tokio::test(start_paused = true)]
async fn a_failure_at_the_very_deadline_leaves_no_time_to_compensate() {
    // The attempt fails exactly as the 1 s budget ends: no retry fits and
    // nothing is left for the handler, so the run is out of budget.
    let node = NodeSpec::from_fn("late", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(StateNodeError::transient("too late"))
        })
    });
    let mut g = chain(
        schema(&[("path", Append), ("err", Merge)]),
        vec![("n", node)],
    );
    g.add_node("compensate", write("path", json!("compensated")))
        .add_edge("compensate", END)
        .set_aegis(
            "n",
            Aegis::new()
                .with_retry(exact(3, Duration::ZERO))
                .with_on_error(ErrorHandlerSpec::Route {
                    to: NodeId::new("compensate"),
                    error_field: field_name("err"),
                }),
        );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(1)));
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert!(
        matches!(
            out.into_result(),
            Err(EngineError::RunTimeoutExceeded { .. })
        ),
        "out of budget, not compensated"
    );
    let rec = records(&e, "t").await;
    assert_eq!(
        rec[0].retry_skipped.map(|s| (s.wait_ms, s.remaining_ms)),
        Some((0, 0))
    );
}
