//! The one-call engines: `WarEngine::in_memory()`, `from_store(..)`,
//! `with_llm(..)` and `with_paladin_port(..)`.

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
use std::sync::Arc;

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
        Ok(PaladinResult {
            output: "fixed".into(),
            ..PaladinResult::default()
        })
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
}

#[tokio::test]
async fn with_llm_runs_paladins_on_the_given_port() {
    let state = WarEngine::in_memory()
        .with_llm(Arc::new(Echo))
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
        .with_llm(Arc::new(Echo))
        .with_paladin_port(Arc::new(Fixed))
        .start(&paladin_graph(), "t-1", json!({ "question": "hi" }))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("draft"), Some(&json!("fixed")));
}

#[tokio::test]
async fn from_store_writes_to_the_given_store() {
    let path = std::env::temp_dir().join(format!(
        "aegis-engine-presets-{}.sqlite",
        std::process::id()
    ));
    let engine = WarEngine::from_store(SqliteWaypointStore::open(&path).await.unwrap());
    engine
        .start(&counting_graph(), "t-1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    drop(engine);
    // A second engine over the same file sees the first one's thread.
    let reopened = WarEngine::from_store(SqliteWaypointStore::open(&path).await.unwrap());
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
