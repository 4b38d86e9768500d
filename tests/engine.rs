//! The superstep engine: merge order, conflicts, limits, panics, routing,
//! cancellation and resume, fingerprints and validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::CancellationToken;
use aegis::engine::InterceptorDecision;
use aegis::engine::NodeInterceptor;
use aegis::error::Incompatibility;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::FINGERPRINT_VERSION;
use aegis::graph::NodeSpec;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::state::MergeError;
use aegis::trace::CollectingTraceSink;
use aegis::waypoint::Activation;
use aegis::waypoint::NodeStatus;
use aegis::waypoint::WaypointStatus;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

/// A node that sleeps `ms` and then appends `item` to `log`.
fn slow_append(ms: u64, item: &'static str) -> NodeSpec {
    NodeSpec::from_fn("slow_append", move |_, _| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(delta(&[("log", json!(item))]).into())
        })
    })
}

fn fan_out(b: NodeSpec, c: NodeSpec) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("log", Append), ("last", LastWrite), ("total", Sum)]),
        EngineLimits::default(),
    );
    g.add_node("a", write("total", json!(1)))
        .add_node("b", b)
        .add_node("c", c)
        .add_node("join", write("total", json!(10)))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("a", "c")
        .add_edge("b", "join")
        .add_edge("c", "join")
        .add_edge("join", END);
    g
}

#[tokio::test(start_paused = true)]
async fn appends_merge_in_vanguard_order_not_completion_order() {
    // `b` finishes last, but merges first: vanguard order is node-id order.
    let g = fan_out(slow_append(50, "from b"), slow_append(10, "from c"));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    let state = out.into_result().unwrap();
    assert_eq!(state.get("log"), Some(&json!(["from b", "from c"])));
    // The join ran once, after both branches: 1 + 10.
    assert_eq!(state.get("total"), Some(&json!(11)));

    let g = fan_out(slow_append(10, "from b"), slow_append(50, "from c"));
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("log"), Some(&json!(["from b", "from c"])));
}

#[tokio::test]
async fn two_last_write_writers_fail_the_run_naming_both() {
    let g = fan_out(write("last", json!("b")), write("last", json!("c")));
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    let RunOutcome::Failed { error, .. } = &out else {
        panic!("expected Failed, got {out:?}")
    };
    match error {
        EngineError::ConflictingWrites { field, writers } => {
            assert_eq!(field.as_str(), "last");
            let names: Vec<_> = writers.iter().map(|w| w.node.as_str()).collect();
            assert_eq!(names, ["b", "c"]);
        }
        other => panic!("unexpected {other:?}"),
    }
    // The run ended through a Failed waypoint that says why.
    let latest = e.store().latest("t").await.unwrap().unwrap();
    assert!(
        matches!(&latest.status, WaypointStatus::Failed { error, .. } if error.contains("conflicting writes"))
    );
}

#[tokio::test]
async fn writing_an_undeclared_field_names_node_and_field() {
    let g = chain(
        schema(&[("x", LastWrite)]),
        vec![("w", write("nope", json!(1)))],
    );
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    match out.into_result().unwrap_err() {
        EngineError::UndeclaredFieldWrite { node, field } => {
            assert_eq!(node.node, "w");
            assert_eq!(field.as_str(), "nope");
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn self_loop(limits: EngineLimits) -> WarGraph {
    let mut g = WarGraph::new(schema(&[("n", Sum)]), limits);
    g.add_node("spin", write("n", json!(1)))
        .add_edge(START, "spin")
        .add_edge("spin", "spin");
    g
}

#[tokio::test]
async fn recursion_limit_ends_the_run_through_a_failed_waypoint() {
    let limits = EngineLimits::default()
        .with_max_supersteps(5)
        .with_max_node_visits(100);
    let e = engine();
    let out = e.start(&self_loop(limits), "t", json!({})).await.unwrap();
    assert!(matches!(
        out,
        RunOutcome::Failed {
            error: EngineError::RecursionLimitExceeded { limit: 5 },
            ..
        }
    ));
    // Exactly five supersteps merged before the limit.
    assert_eq!(out.state().get("n"), Some(&json!(5)));
    let latest = e.store().latest("t").await.unwrap().unwrap();
    assert_eq!(latest.status.name(), "Failed");
}

#[tokio::test]
async fn visit_limit_ends_the_run() {
    let limits = EngineLimits::default()
        .with_max_supersteps(100)
        .with_max_node_visits(3);
    let out = engine()
        .start(&self_loop(limits), "t", json!({}))
        .await
        .unwrap();
    match out.into_result().unwrap_err() {
        EngineError::NodeVisitLimitExceeded { node, limit } => {
            assert_eq!(node.as_str(), "spin");
            assert_eq!(limit, 3);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn run_timeout_ends_the_run_at_exactly_the_limit() {
    let mut g = chain(
        schema(&[("log", Append)]),
        vec![("slow", slow_append(10_000, "late"))],
    );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(3)));
    let t0 = tokio::time::Instant::now();
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    let node_error = out.node_error().cloned();
    match out.into_result().unwrap_err() {
        EngineError::RunTimeoutExceeded { elapsed, limit } => {
            assert_eq!(limit, Duration::from_secs(3));
            assert_eq!(elapsed, Duration::from_secs(3));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        node_error.is_none(),
        "the run failed on its budget, not a node"
    );
    let latest = e.store().latest("t").await.unwrap().unwrap();
    let WaypointStatus::Failed {
        node_error: Some(ne),
        ..
    } = latest.status
    else {
        panic!("expected a Failed waypoint with the cut node's error")
    };
    assert_eq!(ne.source, NodeErrorSource::Timeout(TimeoutKind::EngineRun));
}

#[tokio::test]
async fn a_panicking_node_fails_its_attempt_not_the_process() {
    let boom = NodeSpec::from_fn("boom", |_, _| Box::pin(async { panic!("kaboom") }));
    let g = chain(schema(&[("x", LastWrite)]), vec![("boom", boom)]);
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    let err = out.node_error().expect("node error").clone();
    assert_eq!(err.node_id.as_str(), "boom");
    assert_eq!(err.transience, Transience::Unknown);
    // A panic is its own kind, with the payload as its message: nothing
    // parses a message to recognise one.
    assert_eq!(
        err.source,
        NodeErrorSource::Panic {
            message: "kaboom".to_string()
        }
    );
    assert_eq!(
        err.to_string(),
        "node `boom` failed on attempt 1 (unknown): node panicked: kaboom"
    );
    // The engine still runs other graphs.
    let ok = chain(
        schema(&[("x", LastWrite)]),
        vec![("w", write("x", json!(1)))],
    );
    assert!(e.start(&ok, "t2", json!({})).await.unwrap().is_completed());
}

#[tokio::test]
async fn conditional_edges_route_by_the_merged_state() {
    let mut g = WarGraph::new(
        schema(&[("n", LastWrite), ("path", Append)]),
        EngineLimits::default(),
    );
    g.add_node("decide", write("n", json!(7)))
        .add_node("odd", write("path", json!("odd")))
        .add_node("even", write("path", json!("even")))
        .add_edge(START, "decide")
        .add_conditional_edges("decide", "parity", ["odd", "even"])
        .add_edge("odd", END)
        .add_edge("even", END);
    let parity = Evaluator(|s: &Battlefield| {
        let n = s.get("n").and_then(|v| v.as_i64()).unwrap_or(0);
        vec![NodeId::new(if n % 2 == 0 { "even" } else { "odd" })]
    });

    // An unregistered evaluator is a start error, before any node runs.
    let err = engine().start(&g, "t", json!({})).await.unwrap_err();
    assert!(
        matches!(err, EngineError::UnregisteredEdgeEvaluator { ref names } if names == &["parity".to_string()])
    );

    let e = engine().with_edge_evaluator("parity", Arc::new(parity));
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(state.get("path"), Some(&json!(["odd"])));

    // Choosing an undeclared target fails the run.
    let rogue = Evaluator(|_: &Battlefield| vec![NodeId::new("decide")]);
    let e = engine().with_edge_evaluator("parity", Arc::new(rogue));
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::ConditionalTargetNotDeclared { .. })
    ));
}

#[tokio::test]
async fn goto_must_target_a_successor_or_a_dynamic_target() {
    let jump = NodeSpec::from_fn("jump", |_, _| {
        Box::pin(async { Ok(Directive::goto(StateDelta::new(), "side")) })
    });
    let build = |dynamic: bool| {
        let mut g = WarGraph::new(schema(&[("path", Append)]), EngineLimits::default());
        g.add_node("jump", jump.clone())
            .add_node("main", write("path", json!("main")))
            .add_node("side", write("path", json!("side")))
            .add_edge(START, "jump")
            .add_edge("jump", "main")
            .add_edge("main", "side")
            .add_edge("side", END);
        if dynamic {
            g.mark_dynamic_target("side");
        }
        g
    };
    let out = engine().start(&build(false), "t", json!({})).await.unwrap();
    let err = out.into_result().unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidGoto { ref target, .. } if target.as_str() == "side")
    );
    // The message names the fix, in both ways of declaring a graph.
    let text = err.to_string();
    for needle in [
        "node `jump` returned Goto(`side`)",
        "`dynamic { side }` in graph!",
        "`WarGraph::mark_dynamic_target(\"side\")`",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    let state = run_to_state(&engine(), &build(true), "t", json!({})).await;
    // Goto replaces the static successors: `main` never ran.
    assert_eq!(state.get("path"), Some(&json!(["side"])));
}

#[tokio::test]
async fn end_stops_a_branch() {
    let stop = NodeSpec::from_fn("stop", |_, _| {
        Box::pin(async { Ok(Directive::end(delta(&[("path", json!("stop"))]))) })
    });
    let g = chain(
        schema(&[("path", Append)]),
        vec![("stop", stop), ("never", write("path", json!("never")))],
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("path"), Some(&json!(["stop"])));
}

/// A node that blocks until cancelled, then (after the grace) is abandoned.
fn wait_forever() -> NodeSpec {
    NodeSpec::from_fn("wait_forever", |_, _| {
        Box::pin(async {
            std::future::pending::<()>().await;
            Ok(StateDelta::new().into())
        })
    })
}

#[tokio::test(start_paused = true)]
async fn cancellation_halts_and_resume_finishes_with_the_uninterrupted_state() {
    let runs = counter();
    let gate_open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gated = {
        let gate_open = gate_open.clone();
        NodeSpec::from_fn("gated", move |_, _| {
            let open = gate_open.load(std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                if !open {
                    std::future::pending::<()>().await;
                }
                Ok(delta(&[("n", json!(100))]).into())
            })
        })
    };
    let mut g = WarGraph::new(
        schema(&[("n", Sum)]),
        EngineLimits::default().with_shutdown_grace(Duration::from_secs(2)),
    );
    g.add_node("a", bump("n", runs.clone()))
        .add_node("b", gated)
        .add_node("c", bump("n", runs.clone()))
        .add_node("d", bump("n", runs.clone()))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("a", "c")
        .add_edge("b", "d")
        .add_edge("c", "d")
        .add_edge("d", END);

    let store = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let e = engine_on(&store).with_cancellation(token.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
    });
    let t0 = tokio::time::Instant::now();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    canceller.await.unwrap();
    // Cancelled at 1 s; `b` got the 2 s grace and was then abandoned.
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    let RunOutcome::Halted { vanguard, .. } = &out else {
        panic!("expected Halted, got {out:?}")
    };
    assert_eq!(vanguard, &[NodeId::new("b")]);
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.status.name(), "Halted");
    let b = latest
        .records
        .iter()
        .find(|r| r.node_id.as_str() == "b")
        .unwrap();
    assert_eq!(
        b.status,
        NodeStatus::Skipped {
            reason: "shutdown".into()
        }
    );
    assert_eq!(count(&runs), 2, "a and c ran");

    gate_open.store(true, std::sync::atomic::Ordering::SeqCst);
    let resumed = engine_on(&store).resume(&g, "t", None).await.unwrap();
    let state = resumed.into_result().unwrap();
    // `c` was not re-run: its delta from the halted superstep is reused.
    assert_eq!(count(&runs), 3, "only d ran after resume");

    let reference = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state, reference);
    assert_eq!(state.get("n"), Some(&json!(103)));
}

#[tokio::test(start_paused = true)]
async fn a_finished_attempt_within_the_grace_counts() {
    let quick = NodeSpec::from_fn("quick", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(delta(&[("n", json!(1))]).into())
        })
    });
    let g = chain(
        schema(&[("n", Sum)]),
        vec![("quick", quick), ("after", write("n", json!(5)))],
    );
    let token = CancellationToken::new();
    let e = engine().with_cancellation(token.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
    });
    let out = e.start(&g, "t", json!({})).await.unwrap();
    // `quick` finished inside the 5 s default grace and was merged; `after`
    // was never started.
    let RunOutcome::Halted {
        state, vanguard, ..
    } = out
    else {
        panic!()
    };
    assert_eq!(state.get("n"), Some(&json!(1)));
    assert_eq!(vanguard, [NodeId::new("after")]);
}

#[tokio::test]
async fn resume_refuses_a_graph_whose_waiting_node_changed_but_not_a_retuned_one() {
    let g = chain(schema(&[("x", LastWrite)]), vec![("w", wait_forever())]);
    let token = CancellationToken::new();
    token.cancel();
    let store = Arc::new(InMemoryWaypointStore::new());
    let out = engine_on(&store)
        .with_cancellation(token)
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    assert_eq!(out.name(), "Halted");

    // The waiting node is another kind of node now: not the thread's graph.
    let changed = chain(
        schema(&[("x", LastWrite)]),
        vec![("w", write("x", json!(1)))],
    );
    let err = engine_on(&store)
        .resume(&changed, "t", None)
        .await
        .unwrap_err();
    let EngineError::GraphMismatch { reasons, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(&reasons[..], [Incompatibility::PendingNodeKindChanged { node, .. }] if node.as_str() == "w"),
        "{err}"
    );

    let mut retuned = chain(
        schema(&[("x", LastWrite)]),
        vec![("w", write("x", json!(1)))],
    );
    retuned.set_aegis(
        "w",
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(1))),
    );
    // Different node implementation type: a real graph change.
    assert_ne!(retuned.fingerprint(), g.fingerprint());
    let mut same_shape = g.clone();
    same_shape.set_aegis("w", Aegis::new().with_retry(RetryPolicy::default()));
    assert_eq!(same_shape.fingerprint(), g.fingerprint());
    let stopped = CancellationToken::new();
    stopped.cancel();
    let again = engine_on(&store)
        .with_cancellation(stopped)
        .resume(&same_shape, "t", None)
        .await;
    assert_eq!(again.unwrap().name(), "Halted");

    let err = engine_on(&store)
        .resume(&g, "missing", None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::ThreadNotFound { .. }));
}

fn sample_graph(order: bool) -> WarGraph {
    let mut g = WarGraph::new(
        BattlefieldSchema::new(if order {
            vec![field("a", LastWrite), field("b", Append)]
        } else {
            vec![field("b", Append), field("a", LastWrite)]
        }),
        EngineLimits::default(),
    );
    let nodes = [("x", write("a", json!(1))), ("y", write("b", json!(2)))];
    let edges = [(START, "x"), ("x", "y"), ("y", END)];
    if order {
        for (id, n) in nodes {
            g.add_node(id, n);
        }
        for (a, b) in edges {
            g.add_edge(a, b);
        }
    } else {
        for (id, n) in nodes.into_iter().rev() {
            g.add_node(id, n);
        }
        for (a, b) in edges.into_iter().rev() {
            g.add_edge(a, b);
        }
    }
    g
}

#[test]
fn fingerprint_is_stable_and_order_independent() {
    let a = sample_graph(true).fingerprint();
    assert_eq!(a, sample_graph(true).fingerprint());
    assert_eq!(a, sample_graph(false).fingerprint());
    assert!(a.starts_with(&format!("{FINGERPRINT_VERSION}:")));
    // The golden value is pinned in tests/fingerprint.rs.
    assert_eq!(a.len(), FINGERPRINT_VERSION.len() + 1 + 64);
}

#[test]
fn fingerprint_changes_with_nodes_edges_schema_and_handlers() {
    let base = sample_graph(true).fingerprint();
    let mut g = sample_graph(true);
    g.add_node("z", write("a", json!(3)));
    assert_ne!(g.fingerprint(), base, "node added");

    let mut g = sample_graph(true);
    g.add_edge("x", END);
    assert_ne!(g.fingerprint(), base, "edge added");

    let mut g = WarGraph::new(
        BattlefieldSchema::new(vec![field("a", LastWrite), field("b", Sum)]),
        EngineLimits::default(),
    );
    g.add_node("x", write("a", json!(1)))
        .add_node("y", write("b", json!(2)))
        .add_edge(START, "x")
        .add_edge("x", "y")
        .add_edge("y", END);
    assert_ne!(g.fingerprint(), base, "dispatch rule changed");

    let mut g = sample_graph(true);
    g.add_conditional_edges("x", "route", ["y"]);
    assert_ne!(g.fingerprint(), base, "conditional edge");

    let mut g = sample_graph(true);
    g.mark_dynamic_target("y");
    assert_ne!(g.fingerprint(), base, "dynamic target");

    let mut g = sample_graph(true);
    g.set_aegis(
        "x",
        Aegis::new().with_on_error(ErrorHandlerSpec::Custom("h".into())),
    );
    assert_ne!(g.fingerprint(), base, "on_error is hashed");

    let mut g = sample_graph(true);
    g.set_aegis(
        "x",
        Aegis::new().with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Default,
        )),
    );
    assert_ne!(g.fingerprint(), base, "cache is hashed");

    let mut g = sample_graph(true);
    g.with_default_aegis(
        Aegis::new()
            .with_retry(RetryPolicy::default().with_max_attempts(9))
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(1))),
    );
    g.set_limits(EngineLimits::default().with_max_supersteps(3));
    assert_eq!(
        g.fingerprint(),
        base,
        "retry, timeout and limits are tuning"
    );
}

#[test]
fn validate_lists_every_offender_of_every_kind() {
    let mut g = WarGraph::new(
        BattlefieldSchema::new(vec![field("a", LastWrite), field("a", Sum)]),
        EngineLimits::default(),
    );
    g.add_node("x", write("a", json!(1)))
        .add_node("x", write("a", json!(1)))
        .add_node("island", write("a", json!(1)))
        .add_node("island2", write("a", json!(1)))
        .add_edge("x", "ghost")
        .add_edge("phantom", "x")
        .mark_dynamic_target("nowhere");
    let err = g.validate().unwrap_err();
    let all = err.validation_errors();
    let find = |name: &str| {
        all.iter()
            .find(|e| format!("{e:?}").starts_with(name))
            .unwrap_or_else(|| panic!("missing {name} in {err}"))
    };
    assert!(
        matches!(find("DuplicateNodeId"), EngineError::DuplicateNodeId { nodes } if nodes == &[NodeId::new("x")])
    );
    assert!(
        matches!(find("DuplicateField"), EngineError::DuplicateField { fields } if fields[0].as_str() == "a")
    );
    assert!(
        matches!(find("UnknownEdgeEndpoint"), EngineError::UnknownEdgeEndpoint { edges } if edges.len() == 2)
    );
    assert!(
        matches!(find("UnknownDynamicTarget"), EngineError::UnknownDynamicTarget { nodes } if nodes == &[NodeId::new("nowhere")])
    );
    assert!(matches!(find("NoEntryPoint"), EngineError::NoEntryPoint));
    // Display lists them all for a human.
    let text = err.to_string();
    for needle in [
        "`x`",
        "x -> ghost",
        "phantom -> x",
        "`nowhere`",
        "no entry point",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }

    let mut g = WarGraph::new(schema(&[("a", LastWrite)]), EngineLimits::default());
    g.add_node("x", write("a", json!(1)))
        .add_node("island", write("a", json!(1)))
        .add_node("island2", write("a", json!(1)))
        .add_edge(START, "x")
        .add_edge("x", END);
    let err = g.validate().unwrap_err();
    match &err {
        EngineError::UnreachableNodes { nodes } => {
            assert_eq!(nodes, &[NodeId::new("island"), NodeId::new("island2")]);
        }
        other => panic!("unexpected {other:?}"),
    }
    // A node only a goto reaches is unreachable until it is marked: the
    // message says how, in graph! and on a builder.
    let text = err.to_string();
    for needle in [
        "nodes unreachable from START: `island`, `island2`",
        "`Directive::goto`",
        "`dynamic { .. }` in graph!",
        "`WarGraph::mark_dynamic_target`",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
}

#[tokio::test]
async fn input_is_validated_against_the_schema() {
    let mut s = schema(&[("q", LastWrite)]);
    s = BattlefieldSchema::new(vec![
        s.fields()[0].clone(),
        FieldSpec::new(FieldName::new("must").unwrap(), LastWrite, None, true),
        FieldSpec::new(
            FieldName::new("d").unwrap(),
            LastWrite,
            Some(json!("default")),
            false,
        ),
    ]);
    let g = chain(s, vec![("w", write("q", json!(1)))]);
    let err = engine()
        .start(&g, "t", json!({"bogus": 1}))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::InvalidInput(MergeError::InputFieldsUndeclared { .. })
    ));
    let err = engine().start(&g, "t", json!({})).await.unwrap_err();
    assert!(err.to_string().contains("must"));
    let state = run_to_state(&engine(), &g, "t", json!({"must": true})).await;
    assert_eq!(state.get("d"), Some(&json!("default")));
    assert_eq!(state.get("q"), Some(&json!(1)));
}

#[tokio::test]
async fn one_waypoint_per_superstep_and_chronicle_forks() {
    let runs = counter();
    let g = chain(
        schema(&[("n", Sum)]),
        vec![
            ("a", bump("n", runs.clone())),
            ("b", bump("n", runs.clone())),
            ("c", bump("n", runs.clone())),
        ],
    );
    let e = engine();
    run_to_state(&e, &g, "t", json!({})).await;
    let history = e.chronicle().history("t").await.unwrap();
    // The input waypoint, then one per superstep.
    assert_eq!(history.len(), 4);
    assert_eq!(
        history.iter().map(|w| w.superstep).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(history[3].status, WaypointStatus::Completed);
    assert_eq!(history[1].records[0].node_id.as_str(), "a");
    assert_eq!(history[1].state.get("n"), Some(&json!(1)));
    assert!(history.iter().all(|w| w.fingerprint == g.fingerprint()));

    // Fork after superstep 1 and run the rest on the fork.
    let fork = e.chronicle().fork("t", 1, "t-fork").await.unwrap();
    assert_eq!(*fork.vanguard, [Activation::node("b")]);
    let state = e
        .resume(&g, "t-fork", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("n"), Some(&json!(3)));
    assert_eq!(count(&runs), 5, "the fork re-ran b and c only");
    assert!(matches!(
        e.chronicle().fork("t", 99, "x").await,
        Err(EngineError::WaypointNotFound { seq: 99, .. })
    ));
    assert!(matches!(
        e.start(&g, "t", json!({})).await,
        Err(EngineError::ThreadAlreadyExists { .. })
    ));
}

#[tokio::test]
async fn trace_events_tell_the_run_story() {
    let sink = CollectingTraceSink::new();
    let g = chain(
        schema(&[("x", LastWrite)]),
        vec![("only", write("x", json!(1)))],
    );
    engine()
        .with_trace_sink(sink.clone())
        .start(&g, "t", json!({}))
        .await
        .unwrap();
    let names: Vec<String> = sink
        .events()
        .iter()
        .map(|e| {
            format!("{e:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "RunStarted",
            "SuperstepStarted",
            "NodeStarted",
            "NodeFinished",
            "SuperstepFinished",
            "RunFinished"
        ]
    );
}

#[test]
fn mermaid_draws_nodes_and_every_edge_kind() {
    let mut g = sample_graph(true);
    g.add_node("z", write("a", json!(1)))
        .add_conditional_edges("y", "pick", ["z"])
        .mark_dynamic_target("z");
    let m = g.to_mermaid();
    assert!(m.starts_with("flowchart TD"));
    assert!(m.contains("start([START])"));
    assert!(m.contains("[\"x\"]"));
    assert!(m.contains("-.->|pick|"));
    assert!(m.contains(":::dynamic"));
    assert!(m.contains("--> end_"));
}

#[tokio::test]
async fn interceptors_gate_and_observe() {
    struct Gatekeeper;
    #[async_trait]
    impl NodeInterceptor for Gatekeeper {
        async fn before(&self, node: &NodeId, _: &Battlefield) -> InterceptorDecision {
            match node.as_str() {
                "skipme" => InterceptorDecision::Skip,
                "forbidden" => InterceptorDecision::Fail("not allowed".into()),
                _ => InterceptorDecision::Continue,
            }
        }
    }
    let g = chain(
        schema(&[("path", Append)]),
        vec![
            ("skipme", write("path", json!("skipme"))),
            ("ok", write("path", json!("ok"))),
        ],
    );
    let e = engine().with_interceptor(Gatekeeper);
    let state = run_to_state(&e, &g, "t", json!({})).await;
    // Skipped: no delta, but its edges are followed.
    assert_eq!(state.get("path"), Some(&json!(["ok"])));
    let rec = records(&e, "t").await;
    assert_eq!(
        rec[0].status,
        NodeStatus::Skipped {
            reason: "interceptor".into()
        }
    );

    let g = chain(
        schema(&[("path", Append)]),
        vec![("forbidden", write("path", json!("x")))],
    );
    let out = e.start(&g, "t2", json!({})).await.unwrap();
    let err = out.node_error().unwrap();
    assert_eq!(err.transience, Transience::Permanent);
    assert!(
        matches!(&err.source, NodeErrorSource::Interceptor { message } if message == "not allowed")
    );
}

#[tokio::test(start_paused = true)]
async fn simultaneous_failures_name_the_first_node_in_vanguard_order() {
    let fail_after = |ms: u64| {
        NodeSpec::from_fn("fail_after", move |_, _| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Err(StateNodeError::permanent(format!("failed after {ms} ms")))
            })
        })
    };
    // `b` fails last in time but first in vanguard order.
    let g = fan_out(fail_after(50), fail_after(10));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert_eq!(out.node_error().unwrap().node_id.as_str(), "b");
}

#[tokio::test(start_paused = true)]
async fn records_are_timed_by_one_clock_from_the_calls_start() {
    // `a` works for 5 s (the paused clock's), `b` not at all: `b` starts
    // exactly 5 s after `a` by its record, the clock `a`'s duration is
    // measured with, not the wall clock read afresh per activation.
    let slow = NodeSpec::from_fn("slow", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(delta(&[("out", json!("a"))]).into())
        })
    });
    let g = chain(
        schema(&[("out", LastWrite)]),
        vec![("a", slow), ("b", write("out", json!("b")))],
    );
    let e = engine();
    run_to_state(&e, &g, "t", json!({})).await;
    let history = e.chronicle().history("t").await.unwrap();
    let (a, b) = (&history[1].records[0], &history[2].records[0]);
    assert_eq!((a.node_id.as_str(), b.node_id.as_str()), ("a", "b"));
    assert_eq!(a.duration_ms, 5_000);
    assert_eq!(
        b.started_at.duration_since(a.started_at).unwrap(),
        Duration::from_secs(5)
    );
}
