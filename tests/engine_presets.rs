//! The one way to build an engine: `WarEngine::new(store)` (or
//! `WarEngine::in_memory()`), then `with_llm(..)`, `with_paladin_port(..)`
//! and `with_node_cache(..)`, each taking a value or an `Arc` of it.

use aegis::error::LlmError;
use aegis::error::PaladinError;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::LlmResponse;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinPort;
use aegis::paladin::PaladinResult;
use aegis::prelude::*;
use aegis::waypoint::SqliteWaypointStore;
use aegis::waypoint::WaypointStatus;
use serde_json::json;

#[aegis]
async fn count(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("n", 1)?;
    Ok(delta)
}

fn counting_graph() -> WarGraph {
    graph! {
        schema { n: Sum = 0 }
        nodes { count }
        edges { START -> count -> END }
    }
}

fn writer() -> Paladin {
    Paladin::new("Writer").with_model("echo-1")
}

fn paladin_graph() -> WarGraph {
    graph! {
        schema { question: LastWrite required, draft: LastWrite }
        nodes { writer = paladin(writer(), "Draft a reply to: {question}" -> draft) }
        edges { START -> writer -> END }
    }
}

/// Answers every request with its last message, prefixed by its model.
struct Echo;

#[async_trait]
impl LlmPort for Echo {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let last = request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        Ok(LlmResponse::text(format!("{}: {last}", request.model)))
    }

    fn get_provider_name(&self) -> &str {
        "echo"
    }
}

/// A port that answers every Paladin with a fixed output.
struct Fixed;

#[async_trait]
impl PaladinPort for Fixed {
    async fn execute(&self, _: &Paladin, _: &str) -> Result<PaladinResult, PaladinError> {
        Ok(PaladinResult::new("fixed"))
    }
}

#[tokio::test]
async fn in_memory_runs_a_graph_and_keeps_its_waypoints() {
    let engine = WarEngine::in_memory();
    let state = engine
        .start(&counting_graph(), "t-1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("n"), Some(&json!(1)));
    let latest = engine.store().latest("t-1").await.unwrap().unwrap();
    assert!(matches!(latest.status, WaypointStatus::Completed));
}

#[tokio::test]
async fn in_memory_has_no_llm_until_one_is_given() {
    let outcome = WarEngine::in_memory()
        .start(&paladin_graph(), "t-1", json!({ "question": "hi" }))
        .await
        .unwrap();
    let error = outcome.node_error().expect("the Paladin node fails");
    assert!(
        error.to_string().contains("no PaladinPort is configured"),
        "{error}"
    );
    assert!(error.to_string().contains("WarEngine::with_llm"), "{error}");
}

#[tokio::test]
async fn new_takes_a_store_by_value_or_by_arc() {
    // By value: the engine owns its store.
    let owned = WarEngine::new(InMemoryWaypointStore::new());
    owned
        .start(&counting_graph(), "t-1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert!(owned.store().latest("t-1").await.unwrap().is_some());

    // By Arc: the caller keeps reading the very same store, and a second
    // engine over it resumes what the first wrote; the LLM is shared too.
    let store = std::sync::Arc::new(InMemoryWaypointStore::new());
    let llm = std::sync::Arc::new(Echo);
    let first = WarEngine::new(store.clone()).with_llm(llm.clone());
    assert!(std::sync::Arc::ptr_eq(first.store(), &store));
    first
        .start(&paladin_graph(), "t-2", json!({ "question": "hi" }))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let second = WarEngine::new(store.clone()).with_llm(llm);
    assert!(store.latest("t-2").await.unwrap().is_some());
    assert_eq!(second.chronicle().history("t-2").await.unwrap().len(), 2);
}

#[tokio::test]
async fn with_llm_runs_paladins_on_the_given_port() {
    let state = WarEngine::in_memory()
        .with_llm(Echo)
        .start(&paladin_graph(), "t-1", json!({ "question": "hi" }))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        state.get("draft"),
        Some(&json!("echo-1: Draft a reply to: hi"))
    );
}

#[tokio::test]
async fn with_paladin_port_replaces_the_port() {
    let state = WarEngine::in_memory()
        .with_llm(Echo)
        .with_paladin_port(Fixed)
        .start(&paladin_graph(), "t-1", json!({ "question": "hi" }))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("draft"), Some(&json!("fixed")));
}

#[tokio::test]
async fn new_writes_to_the_given_store() {
    let path = std::env::temp_dir().join(format!(
        "aegis-engine-presets-{}.sqlite",
        std::process::id()
    ));
    let engine = WarEngine::new(SqliteWaypointStore::open(&path).await.unwrap());
    engine
        .start(&counting_graph(), "t-1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    drop(engine);
    // A second engine over the same file sees the first one's thread.
    let reopened = WarEngine::new(SqliteWaypointStore::open(&path).await.unwrap());
    let latest = reopened.store().latest("t-1").await.unwrap();
    drop(reopened);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    assert!(matches!(
        latest.map(|w| w.status),
        Some(WaypointStatus::Completed)
    ));
}
