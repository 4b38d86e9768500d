//! A waypoint store and a node cache written outside the crates, from the
//! public traits alone (`support::third_party`), run through the engine:
//! every waypoint goes through the store's `put`, every lookup through the
//! cache's `get`, and a hit is served from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::prelude::*;
use aegis::{
    cache::NodeCache,
    waypoint::{WaypointStatus, WaypointStore},
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use support::third_party::{MapCache, VecStore};

static ANSWERS: AtomicU32 = AtomicU32::new(0);

#[aegis(cache(ttl = "15m"))]
async fn answer(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    ANSWERS.fetch_add(1, Ordering::SeqCst);
    let question = state
        .get("question")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    let mut delta = StateDelta::new();
    delta.set("answer", format!("the answer to {question}"))?;
    Ok(delta)
}

#[aegis]
async fn polish(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let answer = state.get("answer").and_then(|v| v.as_str()).unwrap_or("");
    let mut delta = StateDelta::new();
    delta.set("polished", format!("{answer}!"))?;
    Ok(delta)
}

#[tokio::test]
async fn a_third_party_store_and_cache_run_a_graph_and_serve_a_hit() {
    let graph = graph! {
        schema { question: LastWrite required, answer: LastWrite, polished: LastWrite }
        nodes { answer, polish }
        edges { START -> answer -> polish -> END }
    };
    let cache = Arc::new(MapCache::default());
    let engine = WarEngine::new(VecStore::default()).with_node_cache(cache.clone());

    let first = engine
        .start(&graph, "first", json!({"question": "life"}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(first.get("polished"), Some(&json!("the answer to life!")));
    assert_eq!(ANSWERS.load(Ordering::SeqCst), 1);
    assert_eq!((cache.gets(), cache.puts()), (1, 1), "one miss, stored");

    // Another thread, the same input: served from the cache, not run.
    let second = engine
        .start(&graph, "second", json!({"question": "life"}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(second, first);
    assert_eq!(ANSWERS.load(Ordering::SeqCst), 1, "the hit ran nothing");
    assert_eq!((cache.gets(), cache.puts()), (2, 1));

    // Every waypoint of both runs went through the store's own `put`, and
    // reads back through `history` and `latest`.
    let store = engine.store();
    let history = store.history("second").await.unwrap();
    let seqs: Vec<u64> = history.iter().map(|w| w.seq).collect();
    assert_eq!(seqs, (0..history.len() as u64).collect::<Vec<_>>());
    let hits: Vec<bool> = history
        .iter()
        .flat_map(|w| &w.records)
        .map(|r| r.cache_hit)
        .collect();
    assert_eq!(hits, [true, false], "answer served, polish run");
    let first_len = store.history("first").await.unwrap().len();
    assert_eq!(store.puts(), first_len + history.len());
    let latest = store.latest("second").await.unwrap().unwrap();
    assert_eq!(latest.seq, history.len() as u64 - 1);
    assert!(matches!(latest.status, WaypointStatus::Completed));

    // The cache is the author's: invalidating it makes the node run again.
    assert_eq!(cache.invalidate_all().await.unwrap(), 1);
    engine
        .start(&graph, "third", json!({"question": "life"}))
        .await
        .unwrap();
    assert_eq!(ANSWERS.load(Ordering::SeqCst), 2);
}
