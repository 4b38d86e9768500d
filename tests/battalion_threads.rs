//! Battalion child threads are named unambiguously: `{parent}>{node}`, with
//! `>` reserved in the thread ids callers choose. Two parents whose names
//! join alike never share a child, a caller's own thread is never adopted
//! as a child, and a child stored under the old `{parent}/{node}` name is
//! left alone (the child starts again, with a warning).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::CancellationToken;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::id::MAX_THREAD_ID_BYTES;
use aegis::id::ThreadIdError;
use aegis::id::battalion_thread_id;
use aegis::prelude::*;
use aegis::waypoint::WaypointStatus;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use support::fixtures::*;

/// `double` (y = 2x, counted) then `middle`.
fn child_graph(doubles: Arc<AtomicU32>, middle: NodeSpec) -> WarGraph {
    let mut child = WarGraph::new(
        schema(&[("x", LastWrite), ("y", LastWrite)]),
        EngineLimits::default(),
    );
    child
        .add_node(
            "double",
            NodeSpec::from_fn("double", move |state, _| {
                doubles.fetch_add(1, Ordering::SeqCst);
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

fn noop() -> NodeSpec {
    NodeSpec::from_fn("noop", |_, _| {
        Box::pin(async { Ok(StateDelta::new().into()) })
    })
}

/// A parent running `child` as Battalion node `node`: input -> x, y -> result.
fn parent_graph(node: &str, child: WarGraph) -> WarGraph {
    let f = |n: &str| FieldName::new(n).unwrap();
    let mut g = WarGraph::new(
        schema(&[("input", LastWrite), ("result", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        node,
        NodeSpec::battalion(
            child,
            vec![(f("input"), f("x"))],
            vec![(f("y"), f("result"))],
        ),
    )
    .add_edge(START, node)
    .add_edge(node, END);
    g
}

async fn result_of(
    e: &WarEngine<InMemoryWaypointStore>,
    g: &WarGraph,
    thread: &str,
    input: i64,
) -> Value {
    e.start(g, thread, json!({"input": input}))
        .await
        .unwrap()
        .into_result()
        .unwrap()
        .get("result")
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn parents_and_nodes_that_join_alike_get_different_children() {
    let doubles = counter();
    let e = engine();
    // `acme/billing` + `invoice` and `acme` + `billing/invoice`: joined
    // with `/` both were `acme/billing/invoice`, and the second parent got
    // the first one's answer.
    let one = parent_graph("invoice", child_graph(doubles.clone(), noop()));
    let two = parent_graph("billing/invoice", child_graph(doubles.clone(), noop()));
    assert_eq!(result_of(&e, &one, "acme/billing", 1).await, json!(2));
    assert_eq!(result_of(&e, &two, "acme", 2).await, json!(4));
    assert_eq!(count(&doubles), 2, "each parent ran its own child");
    for (child, y) in [("acme/billing>invoice", 2), ("acme>billing/invoice", 4)] {
        assert_eq!(
            battalion_thread_id(
                child.split_once('>').unwrap().0,
                &NodeId::new(child.split_once('>').unwrap().1),
                1
            ),
            child
        );
        let last = e.store().latest(child).await.unwrap().unwrap();
        assert_eq!(last.status, WaypointStatus::Completed, "{child}");
        assert_eq!(last.state.get("y"), Some(&json!(y)), "{child}");
    }
}

#[tokio::test]
async fn a_callers_own_thread_is_never_adopted_as_a_child() {
    let doubles = counter();
    let child = child_graph(doubles.clone(), noop());
    let e = engine();
    // The caller's own thread, running the very child graph, named as the
    // child used to be: `orders/checkout`.
    let own = run_to_state(&e, &child, "orders/checkout", json!({"x": 100})).await;
    assert_eq!(own.get("y"), Some(&json!(200)));
    let own_history = e.store().history("orders/checkout").await.unwrap().len();

    let parent = parent_graph("checkout", child_graph(doubles.clone(), noop()));
    assert_eq!(result_of(&e, &parent, "orders", 1).await, json!(2));
    assert_eq!(count(&doubles), 2, "the child ran; nothing was adopted");
    assert_eq!(
        e.store().history("orders/checkout").await.unwrap().len(),
        own_history,
        "the caller's thread is untouched"
    );
    assert!(e.store().latest("orders>checkout").await.unwrap().is_some());

    // Nor can a caller take the child's name: `>` is refused before
    // anything runs, on start, resume and fork alike.
    let err = e
        .start(&child, "orders>checkout2", json!({"x": 1}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            EngineError::InvalidThreadId(ThreadIdError::Reserved { position: 6, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("reserved for Battalion"), "{err}");
    assert!(
        e.store()
            .history("orders>checkout2")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        e.resume(&child, "orders>checkout", None).await,
        Err(EngineError::InvalidThreadId(ThreadIdError::Reserved { .. }))
    ));
    assert!(matches!(
        e.chronicle().fork("orders", 0, "orders>checkout#2").await,
        Err(EngineError::InvalidThreadId(ThreadIdError::Reserved { .. }))
    ));
    assert_eq!(count(&doubles), 2);
}

#[tokio::test]
async fn node_ids_with_reserved_characters_get_their_own_children() {
    // Node ids holding `#` and `>` are escaped, so `n#2`'s first child is
    // not `n`'s second (`t>n#2`), and `a>b`'s is not `b`'s under `t>a`.
    let doubles = counter();
    let e = engine();
    for (thread, node, input) in [
        ("t1", "n#2", 1),
        ("t2", "a>b", 2),
        ("t3", "%3E", 3),
        ("t>a", "b", 4),
    ] {
        let g = parent_graph(node, child_graph(doubles.clone(), noop()));
        match e.start(&g, thread, json!({"input": input})).await {
            Ok(out) => {
                assert_eq!(
                    out.into_result().unwrap().get("result"),
                    Some(&json!(input * 2))
                );
                let child = battalion_thread_id(thread, &NodeId::new(node), 1);
                assert!(e.store().latest(&child).await.unwrap().is_some(), "{child}");
            }
            // A caller may not name a thread `t>a`: `>` is reserved.
            Err(err) => {
                assert_eq!(thread, "t>a", "{err}");
                assert!(matches!(err, EngineError::InvalidThreadId(_)));
            }
        }
    }
    assert_eq!(count(&doubles), 3);
    assert!(e.store().latest("t3>%253E").await.unwrap().is_some());
    assert_eq!(battalion_thread_id("t", &NodeId::new("n#2"), 1), "t>n%232");
    assert_eq!(battalion_thread_id("t", &NodeId::new("n"), 2), "t>n#2");
    assert_eq!(battalion_thread_id("t", &NodeId::new("a>b"), 1), "t>a%3Eb");
}

#[tokio::test]
async fn a_child_id_too_long_for_a_store_fails_the_node_permanently() {
    let doubles = counter();
    let g = parent_graph(
        &"n".repeat(MAX_THREAD_ID_BYTES),
        child_graph(doubles.clone(), noop()),
    );
    let out = engine().start(&g, "p", json!({"input": 1})).await.unwrap();
    let err = out.into_result().unwrap_err();
    let node = err.node_error().expect("the Battalion node failed");
    assert_eq!(node.transience, Transience::Permanent, "{err}");
    assert!(err.to_string().contains("bytes long"), "{err}");
    assert_eq!(count(&doubles), 0);
}

#[tokio::test(start_paused = true)]
async fn a_child_halted_under_the_old_name_starts_again_and_the_old_thread_is_left_alone() {
    // A run halted mid-child: `double` done, `middle` blocked.
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
    let doubles = counter();
    let mut child = child_graph(doubles.clone(), gated);
    child.set_limits(EngineLimits::default().with_shutdown_grace(Duration::from_millis(10)));
    let mut g = parent_graph("sub", child);
    g.set_limits(EngineLimits::default().with_shutdown_grace(Duration::from_millis(100)));
    let halted = Arc::new(InMemoryWaypointStore::new());
    let token = CancellationToken::new();
    let e = engine_on(&halted).with_cancellation(token.clone());
    tokio::spawn({
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            token.cancel();
        }
    });
    assert_eq!(
        e.start(&g, "p", json!({"input": 5})).await.unwrap().name(),
        "Halted"
    );
    assert_eq!(count(&doubles), 1);

    // The same store as the previous version would have left it: the
    // child's waypoints under `p/sub`.
    let legacy = Arc::new(InMemoryWaypointStore::new());
    for w in halted.history("p").await.unwrap() {
        legacy.put(w).await.unwrap();
    }
    let old_child = halted.history("p>sub").await.unwrap();
    assert_eq!(old_child.last().unwrap().status.name(), "Halted");
    for mut w in old_child.clone() {
        w.thread_id = "p/sub".into();
        legacy.put(w).await.unwrap();
    }

    release.store(true, Ordering::SeqCst);
    let state = engine_on(&legacy)
        .resume(&g, "p", None)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("result"), Some(&json!(10)));
    assert_eq!(
        count(&doubles),
        2,
        "the child started again: `double` re-ran"
    );
    assert_eq!(
        legacy.latest("p>sub").await.unwrap().unwrap().status,
        WaypointStatus::Completed
    );
    let untouched = legacy.history("p/sub").await.unwrap();
    assert_eq!(untouched.len(), old_child.len());
    assert_eq!(untouched.last().unwrap().status.name(), "Halted");
}

#[tokio::test]
async fn each_visit_of_a_looping_battalion_runs_a_child_of_its_own() {
    // `b` (a Battalion) runs, then `again` sends the run back to it once:
    // its first visit's child is `t>b`, its second's `t>b#2`.
    let doubles = counter();
    let f = |n: &str| FieldName::new(n).unwrap();
    let mut g = WarGraph::new(
        schema(&[("input", LastWrite), ("result", LastWrite), ("laps", Sum)]),
        EngineLimits::default(),
    );
    let again = NodeSpec::from_fn("again", |state, _| {
        let laps = state.get("laps").and_then(Value::as_i64).unwrap_or(0);
        Box::pin(async move {
            let d = delta(&[("laps", json!(1)), ("input", json!(10))]);
            Ok(if laps == 0 {
                Directive::goto(d, "b")
            } else {
                Directive::end(d)
            })
        })
    });
    g.add_node(
        "b",
        NodeSpec::battalion(
            child_graph(doubles.clone(), noop()),
            vec![(f("input"), f("x"))],
            vec![(f("y"), f("result"))],
        ),
    )
    .add_node("again", again)
    .add_edge(START, "b")
    .add_edge("b", "again")
    .add_edge("again", END)
    .mark_dynamic_target("b");
    let e = engine();
    assert_eq!(result_of(&e, &g, "t", 1).await, json!(20));
    assert_eq!(count(&doubles), 2);
    for (child, y) in [("t>b", 2), ("t>b#2", 20)] {
        let last = e.store().latest(child).await.unwrap().unwrap();
        assert_eq!(last.state.get("y"), Some(&json!(y)), "{child}");
    }
}
