//! A parley that survives its process: the run asks a human, the process
//! exits, and a later process resumes it from the SQLite file with the answer.
//!
//! ```text
//! cargo run --example durable_parley                  # drafts, asks for approval, exits
//! cargo run --example durable_parley -- --answer yes  # a new process resumes with the answer
//! ```
//!
//! Without `--answer` the example starts a fresh thread (replacing the file);
//! with it, it opens the same file and resumes. `--db PATH` picks the file
//! (default: `aegis-durable-parley.sqlite` in the system temp dir).

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyResponse;
use aegis::prelude::*;
use aegis::waypoint::SqliteWaypointStore;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

const THREAD: &str = "release-7";

fn node(name: &'static str, field: &'static str, value: &'static str) -> NodeSpec {
    NodeSpec::from_fn(name, move |_, _| {
        Box::pin(async move {
            let mut delta = StateDelta::new();
            delta.set(field, value)?;
            Ok(delta.into())
        })
    })
}

fn graph() -> Result<WarGraph, Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(
        ["draft", "status"]
            .into_iter()
            .map(|f| {
                Ok(FieldSpec::new(
                    FieldName::new(f)?,
                    DispatchRule::LastWrite,
                    None,
                    false,
                ))
            })
            .collect::<Result<Vec<_>, aegis::state::StateError>>()?,
    );
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node("draft", node("draft", "draft", "release notes for 7.0"))
        .add_node(
            "approval",
            NodeSpec::gate("Publish the release notes?", "publish", "shelve"),
        )
        .add_node("publish", node("publish", "status", "published"))
        .add_node("shelve", node("shelve", "status", "shelved"))
        .add_edge(START, "draft")
        .add_edge("draft", "approval")
        .add_edge("publish", END)
        .add_edge("shelve", END);
    Ok(g)
}

fn arg_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = arg_after(&args, "--db")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("aegis-durable-parley.sqlite"));
    let graph = graph()?;

    let Some(answer) = arg_after(&args, "--answer") else {
        // A fresh start: a new file, a new thread.
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
        let store = Arc::new(SqliteWaypointStore::open(&path).await?);
        let engine = WarEngine::new(store.clone());
        let outcome = engine.start(&graph, THREAD, json!({})).await?;
        if let RunOutcome::AwaitingInput { requests, .. } = &outcome {
            println!("{THREAD} waits for a human: {}", requests[0].1.prompt);
            println!("saved in {}; this process now exits.", path.display());
            println!("resume it with: cargo run --example durable_parley -- --answer yes");
        }
        return Ok(());
    };

    // A later process: open the same file and resume with the answer.
    let store = Arc::new(SqliteWaypointStore::open(&path).await?);
    let latest = store
        .latest(THREAD)
        .await?
        .ok_or("no saved run: start one without --answer")?;
    println!(
        "found {THREAD} at waypoint #{} ({})",
        latest.seq,
        latest.status.name()
    );
    let engine = WarEngine::new(store);
    let state = engine
        .resume(&graph, THREAD, Some(ParleyResponse::new(json!(answer))))
        .await?
        .into_result()?;
    println!(
        "answered {answer:?}: status = {}",
        state.get("status").cloned().unwrap_or_default()
    );
    Ok(())
}
