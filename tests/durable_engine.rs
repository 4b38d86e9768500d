//! The engine over durable stores: a halted run survives its process, and of
//! two engines resuming one thread at once exactly one advances it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::stores;

use aegis::prelude::*;
use aegis::{
    engine::CancellationToken,
    error::EngineError,
    waypoint::{
        InMemoryWaypointStore, NodeStatus, SqliteWaypointStore, WaypointStatus, WaypointStore,
    },
};
use serde_json::json;
use std::sync::Arc;
use stores::{Hook, counting_graph, no_hook};
use tokio::sync::Barrier;

fn engine<S: WaypointStore>(store: Arc<S>) -> WarEngine<S> {
    WarEngine::new(store)
}

fn expected_log(supersteps: u32) -> serde_json::Value {
    json!((1..=supersteps).collect::<Vec<_>>())
}

/// Every superstep closed exactly once in the thread's history: one
/// succeeded `tick` record per superstep, none twice.
async fn assert_each_superstep_applied_once<S: WaypointStore>(store: &S, thread: &str, n: u32) {
    let history = store.history(thread).await.unwrap();
    let closed: Vec<u32> = history
        .iter()
        .filter(|w| !w.interrupted && w.seq > 0)
        .filter(|w| {
            w.records
                .iter()
                .any(|r| r.node_id.as_str() == "tick" && r.status == NodeStatus::Succeeded)
        })
        .map(|w| w.superstep)
        .collect();
    assert_eq!(closed, (1..=n).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halted_run_resumes_from_a_reopened_sqlite_file() {
    let dir = stores::TempDir::new("halted");
    let token = CancellationToken::new();
    // A deploy: the token is cancelled while superstep 4 runs.
    let cancel = token.clone();
    let hook: Hook = Arc::new(move |step| {
        if step == 4 {
            cancel.cancel();
        }
        Box::pin(async {})
    });
    {
        let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
        let outcome = engine(store.clone())
            .with_cancellation(token)
            .start(&counting_graph(10, hook), "deploy", json!({}))
            .await
            .unwrap();
        assert_eq!(outcome.name(), "Halted");
        assert_eq!(outcome.state().get("log"), Some(&expected_log(4)));
        let latest = store.latest("deploy").await.unwrap().unwrap();
        assert!(matches!(latest.status, WaypointStatus::Halted { .. }));
    }
    // A new process: a new store on the same file, a new engine.
    let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    let outcome = engine(store.clone())
        .resume(&counting_graph(10, no_hook()), "deploy", None)
        .await
        .unwrap();
    let uninterrupted = engine(Arc::new(InMemoryWaypointStore::new()))
        .start(&counting_graph(10, no_hook()), "reference", json!({}))
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(outcome.state(), uninterrupted.state());
    assert_eq!(outcome.state().get("count"), Some(&json!(10)));
    assert_each_superstep_applied_once(&*store, "deploy", 10).await;
}

/// Halts a fresh thread before its first superstep, then lets two engines
/// (over `a` and `b`, which share one backend) resume it at once, both
/// running superstep 1 before either writes.
async fn two_engines_race<A: WaypointStore, B: WaypointStore>(a: Arc<A>, b: Arc<B>) {
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let halted = engine(a.clone())
        .with_cancellation(cancelled)
        .start(&counting_graph(3, no_hook()), "contested", json!({}))
        .await
        .unwrap();
    assert_eq!(halted.name(), "Halted");

    let barrier = Arc::new(Barrier::new(2));
    let hook: Hook = Arc::new(move |step| {
        let barrier = barrier.clone();
        Box::pin(async move {
            if step == 1 {
                barrier.wait().await;
            }
        })
    });
    let graph = counting_graph(3, hook);
    let (engine_a, engine_b) = (engine(a.clone()), engine(b.clone()));
    let (first, second) = tokio::join!(
        engine_a.resume(&graph, "contested", None),
        engine_b.resume(&graph, "contested", None),
    );
    let (winner, loser) = match (first, second) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        other => panic!("expected exactly one engine to advance, got {other:?}"),
    };
    assert!(winner.is_completed(), "{winner:?}");
    assert!(
        matches!(&loser, EngineError::ConcurrentUpdate { thread_id } if thread_id == "contested"),
        "{loser:?}"
    );
    // The loser wrote nothing: the history is the start, the halt, and the
    // winner's three supersteps, each applied once.
    let history = b.history("contested").await.unwrap();
    assert_eq!(history.len(), 5);
    let last = history.last().unwrap();
    assert_eq!(last.state.get("log"), Some(&expected_log(3)));
    assert_eq!(last.state.get("count"), Some(&json!(3)));
    assert_each_superstep_applied_once(&*a, "contested", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_in_memory_exactly_one_advances() {
    let store = Arc::new(InMemoryWaypointStore::new());
    two_engines_race(store.clone(), store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_sqlite_file_exactly_one_advances() {
    let dir = stores::TempDir::new("race");
    let a = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    let b = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    two_engines_race(a, b).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_postgres_schema_exactly_one_advances() {
    let schema = stores::unique_schema("race");
    let a = Arc::new(stores::pg_store(&schema).await);
    let b = Arc::new(stores::pg_store(&schema).await);
    two_engines_race(a, b).await;
    stores::drop_pg_schema(&schema).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_by_one_process_is_resumed_by_another_over_postgres() {
    let schema = stores::unique_schema("handover");
    let token = CancellationToken::new();
    let cancel = token.clone();
    let hook: Hook = Arc::new(move |step| {
        if step == 2 {
            cancel.cancel();
        }
        Box::pin(async {})
    });
    let first = Arc::new(stores::pg_store(&schema).await);
    let halted = engine(first)
        .with_cancellation(token)
        .start(&counting_graph(6, hook), "handover", json!({}))
        .await
        .unwrap();
    assert_eq!(halted.name(), "Halted");
    let second = Arc::new(stores::pg_store(&schema).await);
    let outcome = engine(second.clone())
        .resume(&counting_graph(6, no_hook()), "handover", None)
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(outcome.state().get("log"), Some(&expected_log(6)));
    assert_each_superstep_applied_once(&*second, "handover", 6).await;
    stores::drop_pg_schema(&schema).await;
}
