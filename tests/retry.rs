//! Retry: the backoff schedule, the predicates, records and trace events,
//! interceptors, and cancellation during a backoff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::CancellationToken;
use aegis::engine::InterceptorDecision;
use aegis::engine::NodeInterceptor;
use aegis::engine::RetryPredicateError;
use aegis::engine::RetryPredicateEvaluator;
use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use aegis::trace::AttemptStatus;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::Activation;
use aegis::waypoint::NodeStatus;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::fixtures::*;

fn exact(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_jitter(false)
}

/// A node that marks the clock on every attempt and fails transiently
/// until attempt `succeed_on`.
fn marked(clock: Clock, succeed_on: u32) -> NodeSpec {
    NodeSpec::from_fn("marked", move |_, ctx| {
        clock.mark();
        let attempt = ctx.attempt();
        Box::pin(async move {
            if attempt < succeed_on {
                Err(StateNodeError::transient(format!("attempt {attempt}")))
            } else {
                Ok(delta(&[("out", json!(attempt))]).into())
            }
        })
    })
}

fn one_node(spec: NodeSpec, aegis: Aegis) -> WarGraph {
    let mut g = chain(
        schema(&[("out", LastWrite), ("log", Append)]),
        vec![("n", spec)],
    );
    g.set_aegis("n", aegis);
    g
}

fn retry(policy: RetryPolicy) -> Aegis {
    Aegis::default().with_retry(policy)
}

#[tokio::test(start_paused = true)]
async fn default_backoff_waits_exactly_500ms_1s_2s_4s() {
    let clock = Clock::default();
    let g = one_node(marked(clock.clone(), 5), retry(exact(5)));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(out.state().get("out"), Some(&json!(5)));
    assert_eq!(
        clock.gaps(),
        [500, 1000, 2000, 4000].map(Duration::from_millis)
    );
}

#[tokio::test(start_paused = true)]
async fn every_wait_is_capped_at_max_interval() {
    let clock = Clock::default();
    let policy = RetryPolicy::default()
        .with_max_attempts(5)
        .with_initial_interval(Duration::from_millis(400))
        .with_backoff_factor(3.0)
        .with_max_interval(Duration::from_secs(2))
        .with_jitter(false)
        .with_retry_on(RetryPredicate::TransientOnly);
    let g = one_node(marked(clock.clone(), 5), retry(policy));
    engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        clock.gaps(),
        [400, 1200, 2000, 2000].map(Duration::from_millis)
    );
}

#[tokio::test(start_paused = true)]
async fn jittered_waits_stay_within_delay_and_twice_delay() {
    let clock = Clock::default();
    let policy = RetryPolicy::default()
        .with_max_attempts(60)
        .with_initial_interval(Duration::from_millis(100))
        .with_backoff_factor(1.0)
        .with_jitter(true);
    let sink = CollectingTraceSink::new();
    let g = one_node(marked(clock.clone(), 60), retry(policy));
    engine()
        .with_trace_sink(sink.clone())
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    let scheduled: Vec<Duration> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::RetryScheduled { delay, .. } => Some(delay),
            _ => None,
        })
        .collect();
    assert_eq!(scheduled.len(), 59);
    let base = Duration::from_millis(100);
    assert!(
        scheduled.iter().all(|d| *d >= base && *d < 2 * base),
        "{scheduled:?}"
    );
    assert!(
        scheduled.iter().any(|d| *d != scheduled[0]),
        "jitter varies"
    );
    // The engine waited what it announced, rounded up to tokio's 1 ms timer tick.
    let ceil_ms = |d: &Duration| Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64);
    assert_eq!(
        clock.gaps(),
        scheduled.iter().map(ceil_ms).collect::<Vec<_>>()
    );
}

/// The waits announced for a node failing 9 times under jittered backoff,
/// on an engine built by `engine`.
async fn jittered_waits(engine: WarEngine, thread: &str) -> Vec<Duration> {
    let policy = RetryPolicy::default()
        .with_max_attempts(10)
        .with_initial_interval(Duration::from_millis(100))
        .with_jitter(true);
    let sink = CollectingTraceSink::new();
    let g = one_node(marked(Clock::default(), 10), retry(policy));
    engine
        .with_trace_sink(sink.clone())
        .start(&g, thread, json!({}))
        .await
        .unwrap();
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::RetryScheduled { delay, .. } => Some(delay),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_jitter_seed_replays_the_same_waits_and_keeps_the_bounds() {
    let seeded = |seed| engine().with_jitter_seed(seed);
    let first = jittered_waits(seeded(7), "t").await;
    assert_eq!(first.len(), 9);
    // Same seed, same attempt identities: the same waits, to the nanosecond.
    assert_eq!(jittered_waits(seeded(7), "t").await, first);
    // The bounds of the policy hold: [d, 2d) with d = 100 ms x 2^(n-2), capped.
    let policy = RetryPolicy::default().with_initial_interval(Duration::from_millis(100));
    for (i, d) in first.iter().enumerate() {
        let base = policy.base_delay(i as u32 + 2);
        assert!(*d >= base && *d < 2 * base, "wait {i}: {d:?} vs {base:?}");
    }
    assert!(first.iter().any(|d| *d != policy.base_delay(2)), "jittered");
    // Another seed, or another thread, draws other waits.
    assert_ne!(jittered_waits(seeded(8), "t").await, first);
    assert_ne!(jittered_waits(seeded(7), "u").await, first);
}

#[tokio::test(start_paused = true)]
async fn a_zero_interval_retries_at_once_without_the_timer() {
    let clock = Clock::default();
    let policy = (exact(4)).with_initial_interval(Duration::ZERO);
    let g = one_node(marked(clock.clone(), 4), retry(policy));
    let t0 = tokio::time::Instant::now();
    engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(clock.len(), 4);
    // A sleep(0) would round up to the timer's 1 ms tick on every retry.
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

async fn attempts_for(transience: Transience, predicate: RetryPredicate) -> u32 {
    let attempts = counter();
    let g = one_node(
        flaky(10, transience, attempts.clone(), "out"),
        retry(
            (exact(3))
                .with_retry_on(predicate)
                .with_initial_interval(Duration::ZERO),
        ),
    );
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    let err = out.node_error().expect("the node fails finally");
    assert_eq!(err.attempt, count(&attempts));
    count(&attempts)
}

#[tokio::test]
async fn the_predicate_decides_by_transience() {
    use RetryPredicate::*;
    use Transience::*;
    // The default predicate: only transient failures are retried.
    assert_eq!(attempts_for(Transient, TransientOnly).await, 3);
    assert_eq!(attempts_for(Permanent, TransientOnly).await, 1);
    assert_eq!(attempts_for(Unknown, TransientOnly).await, 1);
    assert_eq!(attempts_for(Unknown, TransientOrUnknown).await, 3);
    assert_eq!(attempts_for(Permanent, TransientOrUnknown).await, 1);
    assert_eq!(attempts_for(Permanent, Always).await, 3);
    assert_eq!(attempts_for(Transient, Never).await, 1);
    assert_eq!(RetryPolicy::default().retry_on, TransientOnly);
}

#[tokio::test]
async fn without_a_policy_a_node_runs_once() {
    let attempts = counter();
    let g = one_node(
        flaky(1, Transience::Transient, attempts.clone(), "out"),
        Aegis::default(),
    );
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(out.node_error().is_some());
    assert_eq!(count(&attempts), 1);
}

struct Seen(std::sync::Mutex<Vec<(NodeError, u32)>>, bool);

#[async_trait]
impl RetryPredicateEvaluator for Seen {
    async fn allows(&self, err: &NodeError, attempt: u32) -> Result<bool, RetryPredicateError> {
        self.0.lock().unwrap().push((err.clone(), attempt));
        if self.1 {
            Err(RetryPredicateError::new("predicate backend down"))
        } else {
            Ok(attempt <= 3)
        }
    }
}

#[tokio::test]
async fn a_custom_predicate_sees_the_structured_error_and_the_next_attempt() {
    let attempts = counter();
    let policy = (exact(10))
        .with_retry_on(RetryPredicate::Custom("first-three".into()))
        .with_initial_interval(Duration::ZERO);
    let g = one_node(
        flaky(10, Transience::Permanent, attempts.clone(), "out"),
        retry(policy),
    );

    // Unregistered: refused before any node runs.
    let err = engine().start(&g, "t", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::UnregisteredRetryPredicate { offenders } if offenders[0].reason.contains("first-three"))
    );
    assert_eq!(count(&attempts), 0);

    let seen = Arc::new(Seen(Default::default(), false));
    let e = engine().with_retry_predicate("first-three", seen.clone());
    e.start(&g, "t", json!({})).await.unwrap();
    // It allowed attempts 2 and 3, refused 4: three attempts in all.
    assert_eq!(count(&attempts), 3);
    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.iter().map(|(_, a)| *a).collect::<Vec<_>>(), [2, 3, 4]);
    let (first, _) = &seen[0];
    assert_eq!(first.node_id.as_str(), "n");
    assert_eq!(first.attempt, 1);
    assert_eq!(first.transience, Transience::Permanent);
    assert_eq!(
        first.source,
        NodeErrorSource::Function {
            message: "failure 1".into()
        }
    );
}

#[tokio::test]
async fn a_failing_predicate_means_no_retry() {
    let attempts = counter();
    let policy = (exact(5)).with_retry_on(RetryPredicate::Custom("broken".into()));
    let g = one_node(
        flaky(10, Transience::Transient, attempts.clone(), "out"),
        retry(policy),
    );
    let e = engine().with_retry_predicate("broken", Arc::new(Seen(Default::default(), true)));
    e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(count(&attempts), 1);
}

#[tokio::test(start_paused = true)]
async fn records_and_trace_events_show_every_attempt() {
    let attempts = counter();
    let sink = CollectingTraceSink::new();
    let g = one_node(
        flaky(2, Transience::Transient, attempts.clone(), "out"),
        retry(exact(3)),
    );
    let e = engine().with_trace_sink(sink.clone());
    run_to_state(&e, &g, "t", json!({})).await;

    let rec = records(&e, "t").await;
    assert_eq!(rec.len(), 1);
    let r = &rec[0];
    assert_eq!(r.status, NodeStatus::Succeeded);
    assert_eq!(r.attempt, 3);
    assert_eq!(
        r.attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(r.attempts[1].error.attempt, 2);
    assert_eq!(
        r.attempts[1].error.source,
        NodeErrorSource::Function {
            message: "failure 2".into()
        }
    );
    // 500 ms + 1 s of backoff, measured on the paused clock.
    assert_eq!(r.duration_ms, 1500);

    let per_attempt: Vec<(String, u32)> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::NodeStarted { attempt, .. } => Some(("started".into(), attempt)),
            TraceEvent::NodeFinished {
                attempt,
                status,
                cache_hit,
                ..
            } => {
                assert!(!cache_hit);
                let s = if matches!(status, AttemptStatus::Succeeded) {
                    "ok"
                } else {
                    "failed"
                };
                Some((s.into(), attempt))
            }
            TraceEvent::RetryScheduled { attempt, delay, .. } => {
                Some((format!("retry after {}ms", delay.as_millis()), attempt))
            }
            _ => None,
        })
        .collect();
    let expected: Vec<(String, u32)> = [
        ("started", 1),
        ("failed", 1),
        ("retry after 500ms", 2),
        ("started", 2),
        ("failed", 2),
        ("retry after 1000ms", 3),
        ("started", 3),
        ("ok", 3),
    ]
    .iter()
    .map(|(s, a)| (s.to_string(), *a))
    .collect();
    assert_eq!(per_attempt, expected);
}

#[tokio::test(start_paused = true)]
async fn retries_stay_inside_the_superstep_and_leave_siblings_alone() {
    let attempts = counter();
    let sibling_runs = counter();
    let mut g = WarGraph::new(
        schema(&[("out", LastWrite), ("n", Sum)]),
        EngineLimits::default(),
    );
    g.add_node(
        "flaky",
        flaky(2, Transience::Transient, attempts.clone(), "out"),
    )
    .add_node("sibling", bump("n", sibling_runs.clone()))
    .add_edge(START, "flaky")
    .add_edge(START, "sibling")
    .add_edge("flaky", END)
    .add_edge("sibling", END)
    .set_aegis("flaky", retry(exact(3)));
    let e = engine();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!("ok")));
    assert_eq!(count(&sibling_runs), 1);
    // The input waypoint and one superstep: no waypoint between attempts.
    let history = e.store().history("t").await.unwrap();
    assert_eq!(history.len(), 2);
    let sibling = history[1]
        .records
        .iter()
        .find(|r| r.node_id.as_str() == "sibling")
        .unwrap();
    assert_eq!((sibling.attempt, sibling.attempts.len()), (1, 0));
}

#[tokio::test]
async fn every_attempt_reads_the_same_snapshot() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let node = {
        let seen = seen.clone();
        NodeSpec::from_fn("reader", move |state, ctx| {
            seen.lock().unwrap().push(state.get("log").cloned());
            let attempt = ctx.attempt();
            Box::pin(async move {
                if attempt < 3 {
                    Err(StateNodeError::transient("again"))
                } else {
                    Ok(delta(&[("log", json!("done"))]).into())
                }
            })
        })
    };
    let policy = (exact(3)).with_initial_interval(Duration::ZERO);
    let g = one_node(node, retry(policy));
    let state = run_to_state(&engine(), &g, "t", json!({"log": ["seed"]})).await;
    assert_eq!(*seen.lock().unwrap(), vec![Some(json!(["seed"])); 3]);
    assert_eq!(state.get("log"), Some(&json!(["seed", "done"])));
}

#[tokio::test]
async fn interceptors_run_before_every_attempt_and_after_the_winning_one() {
    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicU32, std::sync::atomic::AtomicU32);
    #[async_trait]
    impl NodeInterceptor for Count {
        async fn before(&self, _: &NodeId, _: &Battlefield) -> InterceptorDecision {
            self.0.fetch_add(1, Ordering::SeqCst);
            InterceptorDecision::Continue
        }
        async fn after(&self, _: &NodeId, _: &Directive) -> InterceptorDecision {
            self.1.fetch_add(1, Ordering::SeqCst);
            InterceptorDecision::Continue
        }
    }
    let hooks = Arc::new(Count::default());
    let attempts = counter();
    let policy = (exact(3)).with_initial_interval(Duration::ZERO);
    let g = one_node(
        flaky(2, Transience::Transient, attempts.clone(), "out"),
        retry(policy),
    );
    engine()
        .with_interceptor(hooks.clone())
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    assert_eq!(hooks.0.load(Ordering::SeqCst), 3);
    assert_eq!(hooks.1.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_interceptor_failure_is_never_retried() {
    struct FailAfter;
    #[async_trait]
    impl NodeInterceptor for FailAfter {
        async fn after(&self, _: &NodeId, _: &Directive) -> InterceptorDecision {
            InterceptorDecision::Fail("output rejected".into())
        }
    }
    let attempts = counter();
    let policy = (exact(5))
        .with_retry_on(RetryPredicate::Always)
        .with_initial_interval(Duration::ZERO);
    let g = one_node(
        flaky(0, Transience::Transient, attempts.clone(), "out"),
        retry(policy),
    );
    let out = engine()
        .with_interceptor(FailAfter)
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    assert_eq!(count(&attempts), 1);
    assert!(matches!(
        out.node_error().unwrap().source,
        NodeErrorSource::Interceptor { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_backoff_halts_at_once_and_resume_starts_at_attempt_one() {
    let seen_attempts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let node = {
        let seen_attempts = seen_attempts.clone();
        let healthy = healthy.clone();
        NodeSpec::from_fn("upstream", move |_, ctx| {
            seen_attempts.lock().unwrap().push(ctx.attempt());
            let ok = healthy.load(Ordering::SeqCst);
            Box::pin(async move {
                if ok {
                    Ok(delta(&[("out", json!("served"))]).into())
                } else {
                    Err(StateNodeError::transient("503"))
                }
            })
        })
    };
    let policy = (exact(3)).with_initial_interval(Duration::from_secs(30));
    let g = one_node(node, retry(policy));
    let store = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let e = engine_on(&store).with_cancellation(token.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
    });
    let t0 = tokio::time::Instant::now();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    // Aborted at the cancel, not after the 30 s backoff nor the 5 s grace.
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    let RunOutcome::Halted { vanguard, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(vanguard, &[NodeId::new("n")]);
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(
        latest.records[0].status,
        NodeStatus::Skipped {
            reason: "shutdown".into()
        }
    );
    assert_eq!(*latest.vanguard, [Activation::node("n")]);

    healthy.store(true, Ordering::SeqCst);
    let state = engine_on(&store)
        .resume(&g, "t", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("out"), Some(&json!("served")));
    assert_eq!(
        *seen_attempts.lock().unwrap(),
        [1, 1],
        "a fresh budget after resume"
    );
}

#[test]
fn a_nodes_own_aegis_wins_wholesale() {
    // The guide's `writer`/`reviewer` sample.
    let mut g = WarGraph::new(
        schema(&[("draft", LastWrite), ("review", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node("writer", write("draft", json!("d")))
        .add_node("reviewer", write("review", json!("r")));
    g.with_default_aegis(
        Aegis::default()
            .with_retry(RetryPolicy::default())
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(30))),
    );
    g.set_aegis(
        "writer",
        Aegis::default().with_retry(RetryPolicy::default().with_max_attempts(5)),
    );
    let writer = g.aegis_for(&NodeId::new("writer")).unwrap();
    assert_eq!(writer.retry.as_ref().unwrap().max_attempts, 5);
    assert_eq!(
        writer.timeout, None,
        "the default's timeout is not merged in"
    );
    let reviewer = g.aegis_for(&NodeId::new("reviewer")).unwrap();
    assert_eq!(reviewer.retry.as_ref().unwrap().max_attempts, 3);
    assert_eq!(
        reviewer.timeout.as_ref().unwrap().run_timeout,
        Some(Duration::from_secs(30))
    );
    // No entry and no default: nothing.
    let bare = WarGraph::new(schema(&[]), EngineLimits::default());
    assert!(bare.aegis_for(&NodeId::new("writer")).is_none());
}

#[test]
fn policy_validation_lists_every_offender() {
    let mut g = chain(
        schema(&[("out", LastWrite)]),
        vec![
            ("a", write("out", json!(1))),
            ("b", write("out", json!(2))),
            ("c", write("out", json!(3))),
        ],
    );
    g.with_default_aegis(
        Aegis::default().with_retry(RetryPolicy::default().with_backoff_factor(f64::NAN)),
    );
    g.set_aegis("a", retry(RetryPolicy::default().with_max_attempts(0)));
    g.set_aegis(
        "b",
        retry(
            RetryPolicy::default()
                .with_backoff_factor(0.5)
                .with_initial_interval(Duration::from_secs(90)),
        ),
    );
    g.set_aegis(
        "c",
        Aegis::default()
            .with_timeout(TimeoutPolicy::run(Duration::ZERO).with_idle_timeout(Duration::ZERO)),
    );
    g.set_aegis("ghost", Aegis::default());
    g.set_aegis("phantom", Aegis::default());
    let err = g.validate().unwrap_err();
    let errs = err.validation_errors();
    let bad_retry = errs
        .iter()
        .find_map(|e| match e {
            EngineError::RetryPolicyInvalid { offenders } => Some(offenders.clone()),
            _ => None,
        })
        .unwrap();
    let who: Vec<Option<&str>> = bad_retry
        .iter()
        .map(|o| o.node.as_ref().map(|n| n.as_str()))
        .collect();
    assert_eq!(who, [None, Some("a"), Some("b"), Some("b")]);
    assert!(bad_retry[0].reason.contains("NaN"));
    assert!(bad_retry[1].reason.contains("max_attempts is 0"));
    assert!(bad_retry[2].reason.contains("0.5"));
    assert!(bad_retry[3].reason.contains("initial_interval"));
    let timeout = errs
        .iter()
        .find_map(|e| match e {
            EngineError::TimeoutPolicyInvalid { offenders } => Some(offenders.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(timeout.len(), 2);
    assert!(errs.iter().any(|e| matches!(e, EngineError::AegisOnUndeclaredNode { nodes } if nodes == &[NodeId::new("ghost"), NodeId::new("phantom")])));
    let text = err.to_string();
    assert!(
        text.contains("default Aegis") && text.contains("`a`: max_attempts is 0"),
        "{text}"
    );

    // A zero initial interval is valid: immediate retries.
    let mut ok = chain(
        schema(&[("out", LastWrite)]),
        vec![("a", write("out", json!(1)))],
    );
    ok.set_aegis(
        "a",
        retry(RetryPolicy::default().with_initial_interval(Duration::ZERO)),
    );
    ok.validate().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempts_partial_work_never_reaches_state() {
    // Attempt 1 appends after 50 ms but is cut at 10 ms by its run timeout;
    // attempt 2 appends at once. Exactly one append survives.
    let node = NodeSpec::from_fn("partial", |_, ctx| {
        let attempt = ctx.attempt();
        Box::pin(async move {
            if attempt == 1 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(delta(&[("log", json!(format!("attempt {attempt}")))]).into())
        })
    });
    let g = one_node(
        node,
        Aegis::default()
            .with_retry((exact(2)).with_initial_interval(Duration::ZERO))
            .with_timeout(TimeoutPolicy::run(Duration::from_millis(10))),
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("log"), Some(&json!(["attempt 2"])));
}

/// `?` on an `LlmError` inside a node keeps its transience: a 503 is
/// retried, a 401 is not.
#[tokio::test(start_paused = true)]
async fn an_llm_error_raised_with_question_mark_keeps_its_transience() {
    async fn call(status: u16) -> Result<(), LlmError> {
        Err(LlmError::ProviderError {
            provider: "p".into(),
            status,
            message: "m".into(),
            retry_after: None,
        })
    }
    for (status, attempts, transience) in [
        (503, 3, Transience::Transient),
        (401, 1, Transience::Permanent),
    ] {
        let runs = counter();
        let node = {
            let runs = runs.clone();
            NodeSpec::from_fn("llm", move |_, _| {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async move {
                    call(status).await?;
                    Ok(StateDelta::new().into())
                })
            })
        };
        let mut g = chain(
            schema(&[("out", DispatchRule::LastWrite)]),
            vec![("n", node)],
        );
        g.set_aegis(
            "n",
            Aegis::default().with_retry(
                RetryPolicy::default()
                    .with_max_attempts(3)
                    .with_initial_interval(Duration::from_millis(1))
                    .with_jitter(false),
            ),
        );
        let out = engine().start(&g, "t", json!({})).await.unwrap();
        let err = out.node_error().unwrap();
        assert_eq!(err.transience, transience, "HTTP {status}");
        assert_eq!(count(&runs), attempts, "HTTP {status}");
    }
}
