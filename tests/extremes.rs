//! Every `Duration` the API accepts is legal, `Duration::MAX` included: the
//! engine never panics on `Instant + Duration` or a backoff product, and a
//! bound too far away for an `Instant` to hold means "no deadline".
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::CancellationToken;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;
use tokio::time::Instant;

/// A node that fails `failures` times (transiently), then writes "ok".
fn graph(failures: u32, aegis: Aegis, limits: EngineLimits) -> (WarGraph, Arc<AtomicCount>) {
    let attempts = counter();
    let mut g = chain(
        schema(&[("out", LastWrite)]),
        vec![(
            "n",
            flaky(failures, Transience::Transient, attempts.clone(), "out"),
        )],
    );
    g.set_aegis("n", aegis);
    g.set_limits(limits);
    (g, attempts)
}

type AtomicCount = std::sync::atomic::AtomicU32;

fn retry(initial: Duration, max_interval: Duration, jitter: bool) -> Option<RetryPolicy> {
    Some(
        RetryPolicy::default()
            .with_initial_interval(initial)
            .with_max_interval(max_interval)
            .with_jitter(jitter),
    )
}

#[tokio::test(start_paused = true)]
async fn unbounded_timeouts_and_budget_let_a_node_finish() {
    let (g, attempts) = graph(
        0,
        Aegis::new()
            .with_timeout(TimeoutPolicy::run(Duration::MAX).with_idle_timeout(Duration::MAX)),
        EngineLimits::default()
            .with_run_timeout(Duration::MAX)
            .with_shutdown_grace(Duration::MAX),
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!("ok")));
    assert_eq!(count(&attempts), 1);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_of_duration_max_under_a_run_budget_is_never_begun() {
    for jitter in [false, true] {
        let (g, attempts) = graph(
            1,
            Aegis::new().with_retry(retry(Duration::MAX, Duration::MAX, jitter)),
            EngineLimits::default().with_run_timeout(Duration::from_secs(10)),
        );
        let t0 = Instant::now();
        let out = engine().start(&g, "t", json!({})).await.unwrap();
        // Budget-aware retry: the endless wait cannot end inside the budget,
        // so the node fails at once with its own error.
        assert_eq!(t0.elapsed(), Duration::ZERO, "jitter {jitter}");
        assert!(matches!(
            out.into_result(),
            Err(EngineError::NodeFailed(e)) if e.attempt == 1
        ));
        assert_eq!(count(&attempts), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_backoff_of_duration_max_without_a_budget_waits_for_cancellation() {
    let store = Arc::new(InMemoryWaypointStore::new());
    let (g, attempts) = graph(
        1,
        Aegis::new().with_retry(retry(Duration::MAX, Duration::MAX, true)),
        EngineLimits::default().with_run_timeout(Duration::MAX),
    );
    let token = CancellationToken::new();
    let engine = engine_on(&store).with_cancellation(token.clone());
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        token.cancel();
    });
    let t0 = Instant::now();
    let out = engine.start(&g, "t", json!({})).await.unwrap();
    cancel.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
    assert!(matches!(out, RunOutcome::Halted { .. }), "{out:?}");
    // Resume starts at attempt 1 again and succeeds on it.
    let state = engine_on(&store)
        .resume(&g, "t", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("out"), Some(&json!("ok")));
    assert_eq!(count(&attempts), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unbounded_shutdown_grace_lets_the_attempt_finish() {
    let slow = NodeSpec::from_fn("slow", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(delta(&[("out", json!("finished"))]).into())
        })
    });
    let mut g = chain(schema(&[("out", LastWrite)]), vec![("n", slow)]);
    g.set_limits(EngineLimits::default().with_shutdown_grace(Duration::MAX));
    let token = CancellationToken::new();
    let engine = engine().with_cancellation(token.clone());
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
    });
    let t0 = Instant::now();
    let out = engine.start(&g, "t", json!({})).await.unwrap();
    cancel.await.unwrap();
    // The attempt ran to its end inside the grace; its superstep completed.
    assert_eq!(t0.elapsed(), Duration::from_secs(30));
    assert_eq!(out.state().get("out"), Some(&json!("finished")));
}

#[tokio::test(start_paused = true)]
async fn a_zero_run_budget_fails_before_any_node_runs() {
    let (g, attempts) = graph(
        0,
        Aegis::default(),
        EngineLimits::default().with_run_timeout(Duration::ZERO),
    );
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::RunTimeoutExceeded { .. })
    ));
    assert_eq!(count(&attempts), 0);
}

// ---------------------------------------------------------------------------
// The whole range, by property.

/// Any duration, with the edges over-represented.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::MAX),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::from_secs(i64::MAX as u64)),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..=10_000).prop_map(Duration::from_millis),
    ]
}

/// Any f64, the special values included.
fn factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(1.0),
        Just(2.0),
        proptest::num::f64::ANY,
        1.0f64..1e6,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The backoff formula never panics and keeps its bounds, whatever the
    /// policy: the base wait never exceeds `max_interval`, jitter only adds.
    #[test]
    fn the_backoff_never_panics_and_stays_under_its_cap(
        initial in duration(),
        max_interval in duration(),
        backoff_factor in factor(),
        attempt in prop_oneof![Just(u32::MAX), 0u32..200, 0u32..=u32::MAX],
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy::default().with_initial_interval(initial).with_max_interval(max_interval).with_backoff_factor(backoff_factor).with_jitter(true);
        let base = policy.base_delay(attempt);
        prop_assert!(base <= max_interval);
        let waited = policy.delay_before(attempt, &mut StdRng::seed_from_u64(seed));
        prop_assert!(waited >= base);
        prop_assert!(base.is_zero() || waited < base.saturating_mul(2) || waited == Duration::MAX);
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A valid policy with extreme durations: any interval, a finite factor ≥ 1.
fn policy() -> impl Strategy<Value = RetryPolicy> {
    (
        1u32..5,
        duration(),
        duration(),
        prop_oneof![Just(1.0), Just(2.0), 1.0f64..1e300],
        any::<bool>(),
    )
        .prop_map(|(max_attempts, a, b, backoff_factor, jitter)| {
            RetryPolicy::default()
                .with_max_attempts(max_attempts)
                .with_initial_interval(a.min(b))
                .with_max_interval(a.max(b))
                .with_backoff_factor(backoff_factor)
                .with_jitter(jitter)
        })
}

fn non_zero() -> impl Strategy<Value = Duration> {
    duration().prop_map(|d| d.max(Duration::from_nanos(1)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A run under any legal policy and limits ends (completed, failed or
    /// halted by a cancellation an hour in) and never panics; a halted run
    /// resumes.
    #[test]
    fn any_legal_durations_run_to_an_outcome(
        failures in 0u32..4,
        retry in proptest::option::of(policy()),
        run_timeout in proptest::option::of(non_zero()),
        idle_timeout in proptest::option::of(non_zero()),
        budget in proptest::option::of(duration()),
        grace in duration(),
        work_ms in 0u64..3_000,
    ) {
        paused_runtime().block_on(async move {
            let attempts = counter();
            let node = {
                let attempts = attempts.clone();
                NodeSpec::from_fn("n", move |_, ctx| {
                    let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(work_ms)).await;
                        ctx.heartbeat();
                        if n < failures {
                            return Err(StateNodeError::transient("not yet"));
                        }
                        Ok(delta(&[("out", json!("ok"))]).into())
                    })
                })
            };
            let mut g = chain(schema(&[("out", LastWrite)]), vec![("n", node)]);
            let timeout = (run_timeout.is_some() || idle_timeout.is_some())
                .then_some(TimeoutPolicy::default().with_run_timeout(run_timeout).with_idle_timeout(idle_timeout));
            g.set_aegis("n", Aegis::new().with_retry(retry.clone()).with_timeout(timeout));
            g.set_limits(EngineLimits::default().with_run_timeout(budget).with_shutdown_grace(grace));
            let store = Arc::new(InMemoryWaypointStore::new());
            let token = CancellationToken::new();
            let engine = engine_on(&store).with_cancellation(token.clone());
            let cancel = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                token.cancel();
            });
            let out = engine.start(&g, "t", json!({})).await.unwrap();
            cancel.abort();
            let max_attempts = retry.as_ref().map_or(1, |r| r.max_attempts);
            assert!(count(&attempts) <= max_attempts);
            match &out {
                RunOutcome::Completed { state, .. } => {
                    assert_eq!(state.get("out"), Some(&json!("ok")));
                }
                RunOutcome::Failed { .. } => {}
                RunOutcome::Halted { .. } => {
                    // Resumes on a fresh engine, under the same bounds.
                    let resumed = tokio::time::timeout(
                        Duration::from_secs(7_200),
                        engine_on(&store).resume(&g, "t", None),
                    )
                    .await;
                    if let Ok(r) = resumed {
                        r.unwrap();
                    }
                }
                other => panic!("unexpected outcome {other:?}"),
            }
        });
    }
}
