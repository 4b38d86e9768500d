//! A fallback hop inside a Paladin call is kept on the activation's record
//! (issue 38: the console and a timeline drawn from waypoints alone tell
//! the same story as the trace): through the codec of both stores, and on
//! the timeline drawn without a trace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::error::{LlmError, Transience};
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::MockLlmAdapter;
use aegis::prelude::*;
use aegis::render::Timeline;
use aegis::waypoint::{HopNote, NodeExecutionRecord, NodeStatus, WaypointStore};
use serde_json::json;
use std::sync::Arc;
use support::fixtures::*;

fn overloaded(provider: &str) -> LlmError {
    LlmError::ProviderError {
        provider: provider.to_string(),
        status: 503,
        message: "overloaded sk-live-0123456789abcdef".to_string(),
        retry_after: None,
    }
}

fn hopping_chain() -> FallbackLlmAdapter {
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_error(overloaded("primary"));
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_response("fine");
    FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap()
}

fn the_hop(records: &[NodeExecutionRecord]) -> HopNote {
    let answer: Vec<_> = records
        .iter()
        .filter(|r| r.node_id.as_str() == "answer")
        .collect();
    assert_eq!(answer.len(), 1, "{records:#?}");
    let r = answer[0];
    assert_eq!(r.status, NodeStatus::Succeeded);
    assert_eq!(r.hops().len(), 1, "{r:#?}");
    r.hops()[0].clone()
}

/// With no trace sink and no stream (nothing listens), the hop is still on
/// the record of the call that succeeded after it, with its attempt,
/// providers, position and a redacted reason.
#[tokio::test(start_paused = true)]
async fn a_hop_is_on_the_record_of_the_call_that_succeeded_after_it() {
    let engine = engine().with_llm(hopping_chain());
    run_to_state(&engine, &one_paladin(Aegis::new()), "t", json!({})).await;
    let hop = the_hop(&records(&engine, "t").await);
    assert_eq!(hop.attempt, 1);
    assert_eq!(hop.from_provider, "primary");
    assert_eq!(hop.to_provider, "backup");
    assert_eq!(hop.position, 1);
    assert_eq!(hop.transience, Transience::Transient);
    assert!(hop.reason.starts_with("ProviderError"), "{hop:?}");
    assert!(hop.reason.contains("overloaded"), "{hop:?}");
    assert!(
        !hop.reason.contains("0123456789abcdef"),
        "unredacted: {hop:?}"
    );
}

/// A record without hops serializes as before (no `hops` key), and one
/// with them reads back whole.
#[test]
fn the_codec_keeps_hops_and_plain_records_stay_small() {
    let plain = NodeExecutionRecord::new(
        NodeId::new("n"),
        NodeStatus::Succeeded,
        1,
        std::time::SystemTime::UNIX_EPOCH,
        3,
    );
    let text = serde_json::to_string(&plain).unwrap();
    assert!(!text.contains("hops"), "{text}");
    let hopped = plain.with_hops(vec![HopNote::new(
        1,
        "a",
        "b",
        1,
        Transience::Transient,
        "ProviderError: 503",
    )]);
    let back: NodeExecutionRecord =
        serde_json::from_str(&serde_json::to_string(&hopped).unwrap()).unwrap();
    assert_eq!(back, hopped);
}

/// The timeline drawn from the waypoints alone (no trace) shows the hop,
/// once; with the trace too, still once.
#[tokio::test(start_paused = true)]
async fn a_timeline_from_waypoints_alone_shows_the_hop_once() {
    let sink = aegis::trace::CollectingTraceSink::new();
    let engine = engine()
        .with_llm(hopping_chain())
        .with_trace_sink(sink.clone());
    run_to_state(&engine, &one_paladin(Aegis::new()), "t", json!({})).await;
    let waypoints = engine.store().history("t").await.unwrap();
    let bare = Timeline::new(&waypoints).to_html();
    assert_eq!(bare.matches("<g class=\"hop\"").count(), 1, "{bare}");
    assert!(bare.contains("primary → backup"), "{bare}");
    let trace = sink.events();
    let traced = Timeline::new(&waypoints).with_trace(&trace).to_html();
    assert_eq!(traced.matches("<g class=\"hop\"").count(), 1, "{traced}");
}

/// The SQLite store's codec keeps the hop.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_hop_survives_the_sqlite_store() {
    use aegis::waypoint::SqliteWaypointStore;
    let dir = support::stores::TempDir::new("hop-records");
    let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    let engine = WarEngine::new(store.clone()).with_llm(hopping_chain());
    engine
        .start(&one_paladin(Aegis::new()), "t", json!({}))
        .await
        .unwrap();
    drop(engine);
    let reopened = SqliteWaypointStore::open(dir.db()).await.unwrap();
    let records: Vec<_> = reopened
        .history("t")
        .await
        .unwrap()
        .into_iter()
        .flat_map(|w| w.records)
        .collect();
    let hop = the_hop(&records);
    assert_eq!((hop.attempt, hop.position), (1, 1));
    assert_eq!(hop.to_provider, "backup");
}
