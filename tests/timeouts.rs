//! Timeouts: the per-attempt wall clock, the heartbeat-driven idle window,
//! and the run budget nesting outside both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use DispatchRule::*;
use aegis::*;
use common::*;
use serde_json::json;
use std::time::Duration;

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
        Aegis {
            timeout: Some(TimeoutPolicy {
                run_timeout: run.map(Duration::from_millis),
                idle_timeout: idle.map(Duration::from_millis),
            }),
            ..Aegis::default()
        },
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
    let state = engine()
        .start(&g, "t", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
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
    engine()
        .start(&g, "t", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
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
    aegis.retry = Some(RetryPolicy {
        jitter: false,
        ..RetryPolicy::default()
    });
    g.set_aegis("n", aegis);
    let e = engine();
    let t0 = tokio::time::Instant::now();
    let state = e
        .start(&g, "t", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
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
        Aegis {
            retry: Some(RetryPolicy {
                retry_on: RetryPredicate::Always,
                ..RetryPolicy::default()
            }),
            timeout: Some(TimeoutPolicy {
                run_timeout: Some(Duration::from_secs(10)),
                idle_timeout: None,
            }),
            ..Aegis::default()
        },
    );
    g.set_limits(EngineLimits {
        run_timeout: Some(Duration::from_secs(3)),
        ..EngineLimits::default()
    });
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
    g.set_limits(EngineLimits {
        run_timeout: Some(Duration::from_secs(30)),
        ..EngineLimits::default()
    });
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        out.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Run)
    );
}

#[tokio::test(start_paused = true)]
async fn the_budget_cuts_a_backoff_short_and_restarts_on_resume() {
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
        Aegis {
            retry: Some(RetryPolicy {
                initial_interval: Duration::from_secs(10),
                jitter: false,
                ..RetryPolicy::default()
            }),
            ..Aegis::default()
        },
    );
    g.set_limits(EngineLimits {
        run_timeout: Some(Duration::from_secs(4)),
        ..EngineLimits::default()
    });
    let store = std::sync::Arc::new(InMemoryWaypointStore::new());
    let t0 = tokio::time::Instant::now();
    let out = engine_on(&store).start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(4));
    assert!(
        matches!(out.into_result(), Err(EngineError::RunTimeoutExceeded { limit, .. }) if limit == Duration::from_secs(4))
    );
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
