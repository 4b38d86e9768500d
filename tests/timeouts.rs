//! Timeouts: the per-attempt wall clock, the heartbeat-driven idle window,
//! and the run budget nesting outside both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use serde_json::json;
use std::time::Duration;
use support::fixtures::*;

/// Beats every `every` for `total`, then finishes.
fn beating(every: Duration, total: Duration) -> NodeSpec {
    NodeSpec::from_fn("beating", move |_, ctx| {
        Box::pin(async move {
            let end = tokio::time::Instant::now() + total;
            while tokio::time::Instant::now() < end {
                tokio::time::sleep(every).await;
                ctx.heartbeat();
            }
            Ok(delta(&[("out", json!("done"))]).into())
        })
    })
}

/// Beats `beats` times, 100 ms apart, then stalls forever.
fn stalling(beats: u32) -> NodeSpec {
    NodeSpec::from_fn("stalling", move |_, ctx| {
        Box::pin(async move {
            for _ in 0..beats {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ctx.heartbeat();
            }
            std::future::pending::<()>().await;
            Ok(StateDelta::new().into())
        })
    })
}

fn timed(spec: NodeSpec, run: Option<u64>, idle: Option<u64>) -> WarGraph {
    let mut g = chain(schema(&[("out", LastWrite)]), vec![("n", spec)]);
    g.set_aegis(
        "n",
        Aegis::new().with_timeout(
            TimeoutPolicy::default()
                .with_run_timeout(run.map(Duration::from_millis))
                .with_idle_timeout(idle.map(Duration::from_millis)),
        ),
    );
    g
}

#[tokio::test(start_paused = true)]
async fn a_beating_node_outlives_its_idle_window() {
    // 5 s of work, a beat every 100 ms, a 1 s idle window: healthy.
    let g = timed(
        beating(Duration::from_millis(100), Duration::from_secs(5)),
        None,
        Some(1000),
    );
    let t0 = tokio::time::Instant::now();
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!("done")));
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_node_is_cut_one_idle_window_after_its_last_beat() {
    let g = timed(stalling(3), Some(60_000), Some(1000));
    let t0 = tokio::time::Instant::now();
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    // Last beat at 300 ms; cut at 1.3 s, long before the 60 s wall clock.
    assert_eq!(t0.elapsed(), Duration::from_millis(1300));
    let err = out.node_error().unwrap();
    assert_eq!(err.source, NodeErrorSource::Timeout(TimeoutKind::Idle));
    assert_eq!(err.transience, Transience::Transient);
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_cuts_even_a_beating_node() {
    let g = timed(
        beating(Duration::from_millis(100), Duration::from_secs(5)),
        Some(2000),
        Some(1000),
    );
    let t0 = tokio::time::Instant::now();
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(
        out.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Run)
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_that_never_beats_is_cut_at_the_idle_window_from_its_start() {
    let g = timed(stalling(0), None, Some(750));
    let t0 = tokio::time::Instant::now();
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_millis(750));
    assert_eq!(
        out.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Idle)
    );
}

#[tokio::test(start_paused = true)]
async fn heartbeat_without_an_idle_timeout_is_a_free_no_op() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let node = {
        let seen = seen.clone();
        NodeSpec::from_fn("beats", move |_, ctx| {
            ctx.heartbeat();
            *seen.lock().unwrap() = Some((
                ctx.heartbeat_handle().is_tracking(),
                ctx.heartbeat_handle().beats(),
            ));
            Box::pin(async { Ok(StateDelta::new().into()) })
        })
    };
    let g = timed(node, Some(1000), None);
    run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(*seen.lock().unwrap(), Some((false, 0)));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_retried_as_transient() {
    let attempts = counter();
    let node = {
        let attempts = attempts.clone();
        NodeSpec::from_fn("slow_then_fast", move |_, _| {
            let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Box::pin(async move {
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
                Ok(delta(&[("out", json!(n))]).into())
            })
        })
    };
    let mut g = timed(node, Some(1000), None);
    let mut aegis = g.aegis_for(&NodeId::new("n")).unwrap().clone();
    aegis.retry = Some(RetryPolicy::default().with_jitter(false));
    g.set_aegis("n", aegis);
    let e = engine();
    let t0 = tokio::time::Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!(2)));
    // 1 s timeout + 500 ms backoff.
    assert_eq!(t0.elapsed(), Duration::from_millis(1500));
    let rec = records(&e, "t").await;
    assert_eq!(
        rec[0].attempts[0].error.source,
        NodeErrorSource::Timeout(TimeoutKind::Run)
    );
    assert_eq!(rec[0].attempts[0].duration_ms, 1000);
}

#[tokio::test(start_paused = true)]
async fn the_engine_budget_is_tightest_names_engine_run_and_is_never_retried() {
    let attempts = counter();
    let node = {
        let attempts = attempts.clone();
        NodeSpec::from_fn("slow", move |_, _| {
            attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(StateDelta::new().into())
            })
        })
    };
    let mut g = chain(schema(&[("out", LastWrite)]), vec![("n", node)]);
    g.set_aegis(
        "n",
        Aegis::new()
            .with_retry(RetryPolicy::default().with_retry_on(RetryPredicate::Always))
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(10))),
    );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(3)));
    let e = engine();
    let t0 = tokio::time::Instant::now();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    assert_eq!(count(&attempts), 1, "the budget is gone: no retry");
    assert!(matches!(
        out.into_result(),
        Err(EngineError::RunTimeoutExceeded { .. })
    ));
    let rec = records(&e, "t").await;
    assert_eq!(
        rec[0].attempts[0].error.source,
        NodeErrorSource::Timeout(TimeoutKind::EngineRun)
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_bound_is_named_when_it_is_tighter_than_the_budget() {
    let mut g = timed(stalling(0), Some(2000), None);
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(30)));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        out.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Run)
    );
}

#[tokio::test(start_paused = true)]
async fn a_backoff_past_the_budget_is_not_begun_and_the_node_reruns_on_resume() {
    let attempts = counter();
    let mut g = chain(
        schema(&[("out", LastWrite)]),
        vec![(
            "n",
            flaky(1, Transience::Transient, attempts.clone(), "out"),
        )],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_retry(
            RetryPolicy::default()
                .with_initial_interval(Duration::from_secs(10))
                .with_jitter(false),
        ),
    );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(4)));
    let store = std::sync::Arc::new(InMemoryWaypointStore::new());
    let t0 = tokio::time::Instant::now();
    let out = engine_on(&store).start(&g, "t", json!({})).await.unwrap();
    // A 10 s backoff cannot end inside a 4 s budget: it is not begun, and
    // the node fails at once with its own error (tests/retry_budget.rs).
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert!(matches!(out.into_result(), Err(EngineError::NodeFailed(e)) if e.attempt == 1));
    assert_eq!(count(&attempts), 1);
    // Resume measures a fresh budget and re-runs the failed node.
    let state = engine_on(&store)
        .resume(&g, "t", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("out"), Some(&json!("ok")));
    assert_eq!(count(&attempts), 2);
}

/// Holds its thread for `hold` without giving the runtime a chance to fire
/// timers, then writes `out`. On the paused clock `advance` is that hold:
/// it moves time past the deadline, and the attempt future is polled first
/// when the runtime wakes, as a node blocking its thread would be.
fn holding(hold: Duration, beat_first: bool) -> NodeSpec {
    NodeSpec::from_fn("holding", move |_, ctx| {
        Box::pin(async move {
            // Let the engine arm its timers before the hold.
            tokio::task::yield_now().await;
            if beat_first {
                ctx.heartbeat();
            }
            tokio::time::advance(hold).await;
            Ok(delta(&[("out", json!("late"))]).into())
        })
    })
}

#[tokio::test(start_paused = true)]
async fn a_result_that_arrives_after_the_run_deadline_is_a_timeout_and_never_merged() {
    let g = timed(holding(Duration::from_secs(3), false), Some(1000), None);
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        out.node_error().map(|e| &e.source),
        Some(&NodeErrorSource::Timeout(TimeoutKind::Run))
    );
    assert_eq!(out.state().get("out"), None);
}

#[tokio::test(start_paused = true)]
async fn a_result_that_arrives_after_the_idle_window_is_an_idle_timeout() {
    let g = timed(
        holding(Duration::from_secs(3), true),
        Some(60_000),
        Some(1000),
    );
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        out.node_error().map(|e| &e.source),
        Some(&NodeErrorSource::Timeout(TimeoutKind::Idle))
    );
    assert_eq!(out.state().get("out"), None);
}

#[tokio::test(start_paused = true)]
async fn a_late_result_is_retried_like_any_timeout_and_a_timely_one_merges() {
    // The first attempt overruns its 1 s bound, the second holds 1 s
    // exactly: a result at the deadline is in time.
    let calls = counter();
    let node = {
        let calls = calls.clone();
        NodeSpec::from_fn("holding", move |_, _| {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                tokio::task::yield_now().await;
                let hold = if n == 0 { 5 } else { 1 };
                tokio::time::advance(Duration::from_secs(hold)).await;
                Ok(delta(&[("out", json!(n))]).into())
            })
        })
    };
    let mut g = timed(node, Some(1000), None);
    g.set_aegis(
        "n",
        Aegis::new()
            .with_retry(RetryPolicy::default().with_initial_interval(Duration::ZERO))
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(1))),
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!(1)));
    assert_eq!(count(&calls), 2);
}

/// With isolated attempts on a multi-thread runtime, a node that blocks its
/// thread holds only its own worker: the run sees its deadline fire and
/// moves on while the node is still blocked. (The real clock: a blocked thread cannot be modelled
/// on the paused one. The node blocks until the test releases it, so the
/// assertion does not depend on how long anything takes.)
#[test]
fn a_node_blocking_its_thread_does_not_hold_the_run_past_its_bound() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = std::sync::Arc::new(std::sync::Mutex::new(blocked));
    let node = NodeSpec::from_fn("blocking", move |_, _| {
        let blocked = blocked.clone();
        Box::pin(async move {
            // A synchronous call that holds the worker thread.
            let _ = blocked
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(60));
            Ok(delta(&[("out", json!("late"))]).into())
        })
    });
    let g = timed(node, Some(50), None);
    let out = rt.block_on(async {
        let engine = engine().with_isolated_attempts();
        let run = tokio::spawn(async move { engine.start(&g, "t", json!({})).await });
        tokio::time::timeout(Duration::from_secs(30), run).await
    });
    release.send(()).unwrap();
    rt.shutdown_background();
    let out = out
        .expect("the blocked node held the run")
        .unwrap()
        .unwrap();
    assert_eq!(
        out.node_error().map(|e| &e.source),
        Some(&NodeErrorSource::Timeout(TimeoutKind::Run))
    );
    assert_eq!(out.state().get("out"), None);
}

/// A panic in a node that runs as its own task is the same failed attempt
/// as one caught inline.
#[test]
fn a_panic_in_a_task_of_its_own_is_a_panic_failure() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let boom = NodeSpec::from_fn("boom", |_, _| Box::pin(async { panic!("kaboom") }));
    let g = timed(boom, None, None);
    let engine = engine().with_isolated_attempts();
    let out = rt.block_on(engine.start(&g, "t", json!({}))).unwrap();
    assert_eq!(
        out.node_error().map(|e| &e.source),
        Some(&NodeErrorSource::Panic {
            message: "kaboom".to_string()
        })
    );
}
