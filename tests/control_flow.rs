//! Control flow: Muster fan-out, Parley, Battalion subgraphs and Gates, and
//! how the Aegis rules apply to each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::CancellationToken;
use aegis::engine::ErrorHandler;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyExpiry;
use aegis::graph::ParleyRequest;
use aegis::graph::ParleyResponse;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::trace::AttemptStatus;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::WaypointStatus;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fixtures::*;

/// `START -> split -> [worker tasks] -> collect -> END`; `split` musters
/// `n` tasks; the worker appends its key after `delay(index)`.
fn muster_graph(n: u32, worker: NodeSpec) -> WarGraph {
    let split = NodeSpec::from_fn("split", move |_, _| {
        Box::pin(async move {
            let tasks = (0..n)
                .map(|i| (format!("t{i:04}"), json!(i)))
                .collect::<Vec<_>>();
            Ok(Directive::muster(StateDelta::new(), "worker", tasks))
        })
    });
    let mut g = WarGraph::new(
        schema(&[("items", Append), ("collected", Sum), ("count", Sum)]),
        EngineLimits::default().with_max_concurrency(2048),
    );
    g.add_node("split", split)
        .add_worker_template("worker", worker)
        .add_node("collect", write("collected", json!(1)))
        .add_edge(START, "split")
        .add_edge("worker", "collect")
        .add_edge("collect", END);
    g
}

fn appender(delay_ms: impl Fn(u64) -> u64 + Send + Sync + 'static) -> NodeSpec {
    let delay_ms = Arc::new(delay_ms);
    NodeSpec::from_fn("appender", move |_, ctx| {
        let task = ctx.task().cloned().expect("a mustered task");
        let delay = delay_ms(task.payload.as_u64().unwrap_or(0));
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok(delta(&[("items", json!(task.task_key)), ("count", json!(1))]).into())
        })
    })
}

#[tokio::test(start_paused = true)]
async fn a_thousand_tasks_merge_in_task_order_whatever_finishes_first() {
    // The last task finishes first.
    let g = muster_graph(1000, appender(|i| 1000 - i));
    let e = engine();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    let items = state.get("items").unwrap().as_array().unwrap().clone();
    let expected: Vec<Value> = (0..1000).map(|i| json!(format!("t{i:04}"))).collect();
    assert_eq!(items, expected);
    assert_eq!(state.get("count"), Some(&json!(1000)));
    // The template's successor ran once, after every task.
    assert_eq!(state.get("collected"), Some(&json!(1)));
    let records = records(&e, "t").await;
    assert_eq!(
        records.iter().filter(|r| r.task_key.is_some()).count(),
        1000
    );
}

#[tokio::test]
async fn a_task_that_routes_fails_the_run_with_a_clear_error() {
    let worker = NodeSpec::from_fn("router", |_, _| {
        Box::pin(async { Ok(Directive::goto(StateDelta::new(), "collect")) })
    });
    let out = engine()
        .start(&muster_graph(3, worker), "t", json!({}))
        .await
        .unwrap();
    match out.into_result().unwrap_err() {
        EngineError::MusterTaskMustReturnEdges {
            node,
            task_key,
            returned,
        } => {
            assert_eq!(
                (node.as_str(), task_key.as_str(), returned.as_str()),
                ("worker", "t0000", "Goto")
            );
        }
        other => panic!("unexpected {other}"),
    }
}

#[tokio::test(start_paused = true)]
async fn halting_mid_muster_resumes_only_the_unfinished_tasks() {
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let release = Arc::new(AtomicBool::new(false));
    let worker = {
        let runs = runs.clone();
        let release = release.clone();
        NodeSpec::from_fn("gated_worker", move |_, ctx| {
            let task = ctx.task().cloned().unwrap();
            *runs
                .lock()
                .unwrap()
                .entry(task.task_key.clone())
                .or_default() += 1;
            let slow = task.payload.as_u64().unwrap() % 2 == 1 && !release.load(Ordering::SeqCst);
            Box::pin(async move {
                if slow {
                    std::future::pending::<()>().await;
                }
                Ok(delta(&[("items", json!(task.task_key))]).into())
            })
        })
    };
    let mut g = muster_graph(20, worker);
    g.set_limits((g.limits().clone()).with_shutdown_grace(Duration::from_millis(10)));
    let store = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let e = engine_on(&store).with_cancellation(token.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
    });
    let out = e.start(&g, "t", json!({})).await.unwrap();
    let RunOutcome::Halted { vanguard, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(vanguard.len(), 10, "the ten odd tasks were abandoned");

    // Progress waypoints listed finished tasks as they finished.
    let history = store.history("t").await.unwrap();
    let progress: Vec<usize> = history
        .iter()
        .filter(|w| w.interrupted && w.status == WaypointStatus::Running)
        .map(|w| w.completed().len())
        .collect();
    assert!(
        !progress.is_empty() && progress.windows(2).all(|p| p[0] <= p[1]),
        "{progress:?}"
    );
    assert_eq!(history.last().unwrap().completed().len(), 10);

    release.store(true, Ordering::SeqCst);
    let state = engine_on(&store)
        .resume(&g, "t", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let runs = runs.lock().unwrap();
    for i in 0..20 {
        let expected = if i % 2 == 0 { 1 } else { 2 };
        assert_eq!(runs[&format!("t{i:04}")], expected, "task {i}");
    }
    let expected: Vec<Value> = (0..20).map(|i| json!(format!("t{i:04}"))).collect();
    assert_eq!(state.get("items").unwrap().as_array().unwrap(), &expected);
}

#[tokio::test(start_paused = true)]
async fn a_failing_task_retries_on_its_own_while_siblings_finish() {
    let attempts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let worker = {
        let attempts = attempts.clone();
        NodeSpec::from_fn("flaky_worker", move |_, ctx| {
            let key = ctx.task().unwrap().task_key.clone();
            *attempts.lock().unwrap().entry(key.clone()).or_default() += 1;
            let attempt = ctx.attempt();
            Box::pin(async move {
                if key == "t0001" && attempt < 3 {
                    return Err(StateNodeError::transient("busy"));
                }
                Ok(delta(&[("items", json!(key))]).into())
            })
        })
    };
    let mut g = muster_graph(3, worker);
    g.set_aegis(
        "worker",
        Aegis::new().with_retry(RetryPolicy::default().with_jitter(false)),
    );
    let e = engine();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(
        state.get("items"),
        Some(&json!(["t0000", "t0001", "t0002"]))
    );
    let counts = attempts.lock().unwrap().clone();
    assert_eq!(
        (counts["t0000"], counts["t0001"], counts["t0002"]),
        (1, 3, 1)
    );
    let rec = records(&e, "t").await;
    let flaky = rec
        .iter()
        .find(|r| r.task_key.as_deref() == Some("t0001"))
        .unwrap();
    assert_eq!((flaky.attempt, flaky.attempts.len()), (3, 2));
}

#[tokio::test]
async fn muster_rules_are_checked() {
    let bad_worker = NodeSpec::from_fn("bad", |_, _| {
        Box::pin(async {
            Ok(Directive::muster(
                StateDelta::new(),
                "collect",
                [("a".to_string(), json!(1))],
            ))
        })
    });
    let mut g = muster_graph(1, write("items", json!(1)));
    g.add_node("bad", bad_worker).add_edge(START, "bad");
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::MusterWorkerNotTemplate { .. })
    ));

    let dup = NodeSpec::from_fn("dup", |_, _| {
        Box::pin(async {
            Ok(Directive::muster(
                StateDelta::new(),
                "worker",
                [("k".to_string(), json!(1)), ("k".to_string(), json!(2))],
            ))
        })
    });
    let mut g = WarGraph::new(schema(&[("items", Append)]), EngineLimits::default());
    g.add_node("dup", dup)
        .add_worker_template("worker", write("items", json!(1)))
        .add_edge(START, "dup");
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(
        matches!(out.into_result(), Err(EngineError::DuplicateTaskKey { ref task_key, .. }) if task_key == "k")
    );

    let mut g = muster_graph(1, write("items", json!(1)));
    g.add_edge("split", "worker");
    assert!(
        matches!(g.validate(), Err(EngineError::WorkerTemplateHasIncomingEdges { ref nodes }) if nodes == &[NodeId::new("worker")])
    );
}

/// Asks a human once; on the re-run writes the answer.
fn asker(seen_attempts: Arc<Mutex<Vec<u32>>>, request: ParleyRequest) -> NodeSpec {
    NodeSpec::from_fn("asker", move |_, ctx| {
        seen_attempts.lock().unwrap().push(ctx.attempt());
        let answer = ctx.parley_response().map(|r| r.value.clone());
        let request = request.clone();
        Box::pin(async move {
            Ok(match answer {
                None => Directive::new(
                    delta(&[("answer", json!("discarded"))]),
                    NextStep::Parley(Box::new(request)),
                ),
                Some(v) => delta(&[("answer", v)]).into(),
            })
        })
    })
}

fn parley_graph(request: ParleyRequest, seen: Arc<Mutex<Vec<u32>>>) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("answer", LastWrite),
            ("side", LastWrite),
            ("done", LastWrite),
        ]),
        EngineLimits::default(),
    );
    g.add_node("ask", asker(seen, request))
        .add_node("side", write("side", json!("merged")))
        .add_node("finish", write("done", json!(true)))
        .add_edge(START, "ask")
        .add_edge(START, "side")
        .add_edge("ask", "finish")
        .add_edge("finish", END)
        .add_edge("side", END)
        .set_aegis("ask", Aegis::new().with_retry(RetryPolicy::default()));
    g
}

#[tokio::test]
async fn a_parley_waits_for_input_and_the_rerun_gets_the_answer() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let g = parley_graph(
        ParleyRequest::new("Ship it?").with_payload(json!({"draft": 1})),
        seen.clone(),
    );
    let store = Arc::new(InMemoryWaypointStore::new());
    let out = engine_on(&store).start(&g, "t", json!({})).await.unwrap();
    let RunOutcome::AwaitingInput {
        requests, state, ..
    } = &out
    else {
        panic!("{out:?}")
    };
    assert_eq!(requests[0].0.as_str(), "ask");
    assert_eq!(requests[0].1.prompt, "Ship it?");
    // The other activation merged; the parleying node's delta did not.
    assert_eq!(state.get("side"), Some(&json!("merged")));
    assert_eq!(state.get("answer"), None);
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.status.name(), "AwaitingInput");

    let e = engine_on(&store);
    assert!(matches!(
        e.resume(&g, "t", None).await,
        Err(EngineError::ParleyResponseRequired { .. })
    ));
    let state = e
        .resume(&g, "t", Some(ParleyResponse::new(json!("yes"))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("answer"), Some(&json!("yes")));
    assert_eq!(state.get("done"), Some(&json!(true)));
    // A parley is not a failure: one attempt, and a fresh attempt 1 after.
    assert_eq!(*seen.lock().unwrap(), [1, 1]);
    assert!(matches!(
        e.resume(&g, "t", Some(ParleyResponse::new(json!(1)))).await,
        Err(EngineError::UnexpectedParleyResponse { .. })
    ));
}

#[tokio::test]
async fn parley_expiry_fails_or_proceeds_with_the_default() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let expired = ParleyRequest::new("?").expires_after(Duration::ZERO, ParleyExpiry::Fail);
    let g = parley_graph(expired, seen.clone());
    let store = Arc::new(InMemoryWaypointStore::new());
    engine_on(&store).start(&g, "t", json!({})).await.unwrap();
    let out = engine_on(&store)
        .resume(&g, "t", Some(ParleyResponse::new(json!("late"))))
        .await
        .unwrap();
    assert!(
        matches!(out.into_result(), Err(EngineError::ParleyExpired { ref node }) if node.as_str() == "ask")
    );

    let proceed = ParleyRequest::new("?")
        .expires_after(Duration::ZERO, ParleyExpiry::Proceed(json!("default")));
    let g = parley_graph(proceed, seen.clone());
    engine_on(&store).start(&g, "p", json!({})).await.unwrap();
    let state = engine_on(&store)
        .resume(&g, "p", Some(ParleyResponse::new(json!("late"))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("answer"), Some(&json!("default")));

    let open = ParleyRequest::new("?").expires_after(
        Duration::from_secs(3600),
        ParleyExpiry::Proceed(json!("default")),
    );
    let g = parley_graph(open, seen);
    engine_on(&store).start(&g, "o", json!({})).await.unwrap();
    let state = engine_on(&store)
        .resume(&g, "o", Some(ParleyResponse::new(json!("in time"))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("answer"), Some(&json!("in time")));
}

fn gate_graph() -> WarGraph {
    let mut g = WarGraph::new(schema(&[("path", Append)]), EngineLimits::default());
    g.add_node("draft", write("path", json!("draft")))
        .add_node("approval", NodeSpec::gate("Publish?", "publish", "revise"))
        .add_node("publish", write("path", json!("published")))
        .add_node("revise", write("path", json!("revised")))
        .add_edge(START, "draft")
        .add_edge("draft", "approval")
        .add_edge("publish", END)
        .add_edge("revise", END);
    g
}

#[tokio::test]
async fn a_gate_routes_by_the_answer() {
    for (answer, expected) in [
        (json!(true), "published"),
        (json!("no"), "revised"),
        (json!({"approved": true}), "published"),
    ] {
        let g = gate_graph();
        g.validate().unwrap();
        let store = Arc::new(InMemoryWaypointStore::new());
        let out = engine_on(&store).start(&g, "t", json!({})).await.unwrap();
        assert_eq!(out.name(), "AwaitingInput");
        let state = engine_on(&store)
            .resume(&g, "t", Some(ParleyResponse::new(answer)))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(state.get("path"), Some(&json!(["draft", expected])));
    }
}

fn child_graph(middle: NodeSpec) -> WarGraph {
    let mut child = WarGraph::new(
        schema(&[("x", LastWrite), ("y", Sum)]),
        EngineLimits::default(),
    );
    child
        .add_node(
            "double",
            NodeSpec::from_fn("double", |state, _| {
                let x = state.get("x").and_then(Value::as_i64).unwrap_or(0);
                Box::pin(async move { Ok(delta(&[("y", json!(x * 2))]).into()) })
            }),
        )
        .add_node("middle", middle)
        .add_edge(START, "double")
        .add_edge("double", "middle")
        .add_edge("middle", END);
    child
}

fn parent_graph(child: WarGraph) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("input", LastWrite), ("result", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "sub",
        NodeSpec::battalion(
            child,
            vec![(
                FieldName::new("input").unwrap(),
                FieldName::new("x").unwrap(),
            )],
            vec![(
                FieldName::new("y").unwrap(),
                FieldName::new("result").unwrap(),
            )],
        ),
    )
    .add_edge(START, "sub")
    .add_edge("sub", END);
    g
}

/// `parent_graph(child_graph(middle))` with the child's and the parent's
/// shutdown graces.
fn graced_parent(middle: NodeSpec, child_grace: Duration, parent_grace: Duration) -> WarGraph {
    let graced = |shutdown_grace| EngineLimits::default().with_shutdown_grace(shutdown_grace);
    let mut child = child_graph(middle);
    child.set_limits(graced(child_grace));
    let mut g = parent_graph(child);
    g.set_limits(graced(parent_grace));
    g
}

/// Cancels `token` once `after` has passed on tokio's clock.
fn cancel_after(token: CancellationToken, after: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        token.cancel();
    });
}

#[tokio::test]
async fn a_battalion_maps_state_both_ways_and_keeps_its_own_waypoints() {
    let g = parent_graph(child_graph(write("y", json!(1))));
    g.validate().unwrap();
    let e = engine();
    let state = run_to_state(&e, &g, "p", json!({"input": 20})).await;
    assert_eq!(state.get("result"), Some(&json!(41)));
    let child = e.store().history("p>sub").await.unwrap();
    assert_eq!(child.len(), 3, "input + two child supersteps");
    assert_eq!(child.last().unwrap().status, WaypointStatus::Completed);
    assert!(g.to_mermaid().contains("subgraph"));
}

#[tokio::test]
async fn attempt_events_name_their_thread_and_superstep_child_runs_included() {
    // One sink sees the parent and its child: only the thread on each
    // attempt event tells the child's `double` from the parent's `sub`.
    let g = parent_graph(child_graph(write("y", json!(1))));
    let sink = CollectingTraceSink::new();
    let e = engine().with_trace_sink(sink.clone());
    e.start(&g, "p", json!({"input": 1})).await.unwrap();
    // (thread, superstep, node) of every NodeStarted (`true`) or
    // NodeFinished (`false`) event.
    let of = |started: bool| -> Vec<(String, u32, String)> {
        sink.events()
            .into_iter()
            .filter_map(|ev| match ev {
                TraceEvent::NodeStarted {
                    thread_id,
                    superstep,
                    node_id,
                    ..
                } if started => Some((thread_id, superstep, node_id.to_string())),
                TraceEvent::NodeFinished {
                    thread_id,
                    superstep,
                    node_id,
                    ..
                } if !started => Some((thread_id, superstep, node_id.to_string())),
                _ => None,
            })
            .collect()
    };
    let (attempts, finished) = (of(true), of(false));
    let want = [
        ("p", 1, "sub"),
        ("p>sub", 1, "double"),
        ("p>sub", 2, "middle"),
    ]
    .map(|(t, s, n)| (t.to_string(), s, n.to_string()));
    assert_eq!(attempts, want);
    // Finish order is inside-out: the child's attempts end before the parent's.
    assert_eq!(
        finished,
        [want[1].clone(), want[2].clone(), want[0].clone()]
    );
}

#[tokio::test(start_paused = true)]
async fn a_battalion_timeout_fails_the_parent_attempt_with_timeout() {
    let stuck = NodeSpec::from_fn("stuck", |_, _| {
        Box::pin(async {
            std::future::pending::<()>().await;
            Ok(StateDelta::new().into())
        })
    });
    let mut g = parent_graph(child_graph(stuck));
    g.set_aegis(
        "sub",
        Aegis::new().with_timeout(TimeoutPolicy::run(Duration::from_secs(5))),
    );
    let out = engine().start(&g, "p", json!({"input": 1})).await.unwrap();
    assert_eq!(
        out.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Run)
    );
}

#[tokio::test(start_paused = true)]
async fn a_beating_battalion_outlives_an_idle_timeout_longer_than_a_child_superstep() {
    let steps = NodeSpec::from_fn("slow_step", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Ok(StateDelta::new().into())
        })
    });
    let mut child = WarGraph::new(
        schema(&[("x", LastWrite), ("y", Sum)]),
        EngineLimits::default(),
    );
    child
        .add_node("a", steps.clone())
        .add_node("b", steps.clone())
        .add_node("c", steps)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END);
    let mut g = parent_graph(child);
    g.set_aegis(
        "sub",
        Aegis::new().with_timeout(TimeoutPolicy::idle(Duration::from_secs(1))),
    );
    // 2.4 s of child work, a beat every 0.8 s, a 1 s idle window.
    run_to_state(&engine(), &g, "p", json!({"input": 1})).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_parent_halts_the_child_and_resume_finishes_both() {
    let release = Arc::new(AtomicBool::new(false));
    let gated = {
        let release = release.clone();
        NodeSpec::from_fn("gated", move |_, _| {
            let open = release.load(Ordering::SeqCst);
            Box::pin(async move {
                if !open {
                    std::future::pending::<()>().await;
                }
                Ok(StateDelta::new().into())
            })
        })
    };
    // The child's grace is shorter than the parent's, so the child halts
    // (and says so in its own waypoint) before the parent gives up on it.
    let g = graced_parent(gated, Duration::from_millis(10), Duration::from_millis(100));
    let store = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let e = engine_on(&store).with_cancellation(token.clone());
    cancel_after(token, Duration::from_secs(1));
    let out = e.start(&g, "p", json!({"input": 5})).await.unwrap();
    assert_eq!(out.name(), "Halted");
    assert_eq!(
        store.latest("p>sub").await.unwrap().unwrap().status.name(),
        "Halted"
    );

    release.store(true, Ordering::SeqCst);
    let state = engine_on(&store)
        .resume(&g, "p", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("result"), Some(&json!(10)));
    assert_eq!(
        store.latest("p>sub").await.unwrap().unwrap().status,
        WaypointStatus::Completed
    );
}

#[tokio::test(start_paused = true)]
async fn a_child_with_a_longer_grace_halts_within_its_parents() {
    // The child's node works 1 s; the child's own grace (5 s) would let it
    // finish, but the parent's (100 ms) is the ceiling: at 110 ms the child
    // attempt is shut down, the child writes its Halted waypoint, and only
    // then does the parent record its attempt as shut down.
    let runs = counter();
    let slow = {
        let runs = runs.clone();
        NodeSpec::from_fn("slow", move |_, _| {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(StateDelta::new().into())
            })
        })
    };
    let g = graced_parent(slow, Duration::from_secs(5), Duration::from_millis(100));
    let store = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let sink = CollectingTraceSink::new();
    let e = engine_on(&store)
        .with_cancellation(token.clone())
        .with_trace_sink(sink.clone());
    cancel_after(token, Duration::from_millis(10));
    let t0 = tokio::time::Instant::now();
    let out = e.start(&g, "p", json!({"input": 5})).await.unwrap();
    assert_eq!(out.name(), "Halted");
    assert_eq!(t0.elapsed(), Duration::from_millis(110));
    let child_last = store.latest("p>sub").await.unwrap().unwrap();
    assert_eq!(child_last.status.name(), "Halted");
    // Every attempt started was reported finished, the child's included.
    let events = sink.events();
    let started = |thread: &str| {
        events
            .iter()
            .filter(
                |e| matches!(e, TraceEvent::NodeStarted { thread_id, .. } if thread_id == thread),
            )
            .count()
    };
    let shut_down: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::NodeFinished {
                thread_id,
                node_id,
                status: AttemptStatus::Skipped { reason },
                ..
            } if reason == "shutdown" => Some((thread_id.clone(), node_id.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!((started("p"), started("p>sub")), (1, 2));
    assert_eq!(
        shut_down,
        [
            ("p>sub".to_string(), "middle".to_string()),
            ("p".to_string(), "sub".to_string())
        ]
    );

    let state = engine_on(&store)
        .resume(&g, "p", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("result"), Some(&json!(10)));
    assert_eq!(count(&runs), 2, "the shut-down child attempt ran again");
}

#[tokio::test]
async fn a_child_parley_suspends_the_parent_and_the_answer_goes_down() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ask = {
        let seen = seen.clone();
        NodeSpec::from_fn("child_asker", move |_, ctx| {
            seen.lock().unwrap().push(ctx.attempt());
            let answer = ctx.parley_response().map(|r| r.value.clone());
            Box::pin(async move {
                Ok(match answer {
                    None => Directive::parley(ParleyRequest::new("How much?")),
                    Some(v) => delta(&[("y", v)]).into(),
                })
            })
        })
    };
    let g = parent_graph(child_graph(ask));
    let store = Arc::new(InMemoryWaypointStore::new());
    let out = engine_on(&store)
        .start(&g, "p", json!({"input": 1}))
        .await
        .unwrap();
    let RunOutcome::AwaitingInput { requests, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(requests[0].1.prompt, "How much?");
    assert_eq!(
        store.latest("p>sub").await.unwrap().unwrap().status.name(),
        "AwaitingInput"
    );
    let state = engine_on(&store)
        .resume(&g, "p", Some(ParleyResponse::new(json!(100))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    // y = 2 (double) + 100 (the answer), through the Sum field.
    assert_eq!(state.get("result"), Some(&json!(102)));
}

#[test]
fn the_support_matrix_rejects_every_forbidden_combination() {
    let mut g = gate_graph();
    g.add_node(
        "sub",
        NodeSpec::battalion(child_graph(write("y", json!(1))), vec![], vec![]),
    )
    .add_edge("publish", "sub")
    .add_edge("sub", END);
    let all = Aegis::new()
        .with_retry(RetryPolicy::default())
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(1)))
        .with_on_error(ErrorHandlerSpec::Absorb {
            fallback_delta: StateDelta::new(),
        })
        .with_cache(CachePolicy::new(
            Duration::from_secs(1),
            CacheKeySpec::Default,
        ));
    g.set_aegis("approval", all.clone()).set_aegis("sub", all);
    let err = g.validate().unwrap_err();
    let offenders: Vec<String> = err
        .validation_errors()
        .into_iter()
        .filter_map(|e| match e {
            EngineError::AegisUnsupportedForNodeKind { offenders } => {
                Some(offenders.iter().map(|o| o.to_string()).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        offenders,
        [
            "`approval`: retry is not supported on a Gate node",
            "`approval`: timeout is not supported on a Gate node",
            "`approval`: on_error is not supported on a Gate node",
            "`approval`: cache is not supported on a Gate node",
            "`sub`: retry is not supported on a Battalion node",
            "`sub`: cache is not supported on a Battalion node",
        ]
    );
}

struct RoutesAway;

#[async_trait]
impl ErrorHandler for RoutesAway {
    async fn handle(&self, _: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        Ok(Directive::end(StateDelta::new()))
    }
}

#[tokio::test]
async fn worker_template_handlers_contribute_deltas_only() {
    let failing = NodeSpec::from_fn("failing_worker", |_, ctx| {
        let key = ctx.task().unwrap().task_key.clone();
        Box::pin(async move {
            if key == "t0001" {
                Err(StateNodeError::permanent("bad item"))
            } else {
                Ok(delta(&[("items", json!(key))]).into())
            }
        })
    });
    let mut g = muster_graph(3, failing.clone());
    g.set_aegis(
        "worker",
        Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
            fallback_delta: delta(&[("items", json!("skipped"))]),
        }),
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(
        state.get("items"),
        Some(&json!(["t0000", "skipped", "t0002"]))
    );

    let mut g = muster_graph(3, failing);
    g.set_aegis(
        "worker",
        Aegis::new().with_on_error(ErrorHandlerSpec::Custom("away".into())),
    );
    let out = engine()
        .with_error_handler("away", Arc::new(RoutesAway))
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::MusterHandlerMustBeDeltaOnly { ref task_key, ref returned, .. }) if task_key == "t0001" && returned == "End"
    ));

    let mut g = muster_graph(1, write("items", json!(1)));
    g.add_node("fix", write("items", json!(1)))
        .add_edge("fix", END);
    g.set_aegis(
        "worker",
        Aegis::new().with_on_error(ErrorHandlerSpec::Route {
            to: NodeId::new("fix"),
            error_field: FieldName::new("items").unwrap(),
        }),
    );
    g.set_aegis(
        "split",
        Aegis::new().with_on_error(ErrorHandlerSpec::Route {
            to: NodeId::new("worker"),
            error_field: FieldName::new("items").unwrap(),
        }),
    );
    let errs = g.validate().unwrap_err();
    let text = format!("{errs:?}");
    assert!(text.contains("HandlerNotAllowedOnWorkerTemplate"), "{text}");
    assert!(text.contains("RouteTargetIsWorkerTemplate"), "{text}");
}

struct AskAHuman;

#[async_trait]
impl ErrorHandler for AskAHuman {
    async fn handle(&self, err: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        Ok(Directive::parley(ParleyRequest::new(format!(
            "{} failed; retry?",
            err.node_id
        ))))
    }
}

#[tokio::test]
async fn a_custom_handler_may_parley_and_the_rerun_is_a_fresh_attempt_one() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let node = {
        let seen = seen.clone();
        NodeSpec::from_fn("needs_help", move |_, ctx| {
            seen.lock()
                .unwrap()
                .push((ctx.attempt(), ctx.parley_response().is_some()));
            let helped = ctx.parley_response().is_some();
            Box::pin(async move {
                if helped {
                    Ok(delta(&[("out", json!("fixed"))]).into())
                } else {
                    Err(StateNodeError::transient("flaky"))
                }
            })
        })
    };
    let mut g = chain(schema(&[("out", LastWrite)]), vec![("n", node)]);
    g.set_aegis(
        "n",
        Aegis::new()
            .with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_interval(Duration::ZERO),
            )
            .with_on_error(ErrorHandlerSpec::Custom("ask".into())),
    );
    let store = Arc::new(InMemoryWaypointStore::new());
    let e = engine_on(&store).with_error_handler("ask", Arc::new(AskAHuman));
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(out.name(), "AwaitingInput");
    let e = engine_on(&store).with_error_handler("ask", Arc::new(AskAHuman));
    let state = e
        .resume(&g, "t", Some(ParleyResponse::new(json!("go"))))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("out"), Some(&json!("fixed")));
    assert_eq!(*seen.lock().unwrap(), [(1, false), (2, false), (1, true)]);
}

#[tokio::test]
async fn battalion_children_are_validated_with_their_parent() {
    let mut child = child_graph(write("y", json!(1)));
    child.set_aegis(
        "double",
        Aegis::new().with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Default,
        )),
    );
    let g = parent_graph(child);
    // A cache policy inside the child needs the (inherited) backend too.
    let err = engine()
        .start(&g, "p", json!({"input": 1}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::BattalionChildInvalid { node, error } if node.as_str() == "sub"
            && matches!(**error, EngineError::CachePolicyWithoutCacheBackend { .. })),
        "{err:?}"
    );
    // With a backend on the parent engine, the child's node is cached.
    let e = engine().with_node_cache(InMemoryNodeCache::new());
    run_to_state(&e, &g, "p1", json!({"input": 1})).await;
    run_to_state(&e, &g, "p2", json!({"input": 1})).await;
    let hits: Vec<bool> = records(&e, "p2>sub")
        .await
        .iter()
        .map(|r| r.cache_hit)
        .collect();
    assert_eq!(hits, [true, false]);

    let mut bad = WarGraph::new(schema(&[("input", LastWrite)]), EngineLimits::default());
    bad.add_node(
        "sub",
        NodeSpec::battalion(
            child_graph(write("y", json!(1))),
            vec![(
                FieldName::new("nope").unwrap(),
                FieldName::new("x").unwrap(),
            )],
            vec![(
                FieldName::new("zzz").unwrap(),
                FieldName::new("input").unwrap(),
            )],
        ),
    )
    .add_edge(START, "sub")
    .add_edge("sub", END);
    let err = bad.validate().unwrap_err();
    let EngineError::BattalionMappingInvalid { offenders } = err else {
        panic!("{err:?}")
    };
    assert_eq!(offenders.len(), 2, "{offenders:?}");
}
