//! A run that survives its process.
//!
//! ```text
//! cargo run --example durable_resume              # runs until a "deploy" halts it, then exits
//! cargo run --example durable_resume -- --resume  # a new process resumes it from the file
//! ```
//!
//! The first invocation starts an order pipeline against a SQLite file. While
//! `charge` runs, a deploy cancels the engine's token (a real service would
//! do it on SIGTERM): `charge` finishes within the shutdown grace, the run
//! halts before `pack`, the Halted waypoint is on disk, and the process
//! exits. The second invocation opens the same file and resumes the thread:
//! `pack`, `ship` and `notify` run, and nothing that already ran runs again.
//!
//! `--db PATH` picks the file (default: `aegis-durable-resume.sqlite` in the
//! system temp dir).

use aegis::engine::CancellationToken;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::prelude::*;
use aegis::waypoint::SqliteWaypointStore;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

const THREAD: &str = "order-42";
const STAGES: [&str; 6] = ["validate", "reserve", "charge", "pack", "ship", "notify"];

/// One pipeline stage: logs itself, and may play the deploy that stops the
/// process.
struct Stage {
    name: &'static str,
    deploy: Option<CancellationToken>,
}

#[async_trait]
impl StateNode for Stage {
    async fn run(
        &self,
        _state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        println!("  superstep {}: {}", ctx.superstep(), self.name);
        if let Some(deploy) = &self.deploy {
            println!("  ... a deploy arrives: the engine is asked to shut down");
            deploy.cancel();
        }
        let mut delta = StateDelta::new();
        delta
            .set("log", format!("{} done", self.name))?
            .set("stage", self.name)?;
        Ok(delta.into())
    }

    fn kind_name(&self) -> &str {
        // The implementation, not its deploy hook, is what the graph's
        // fingerprint records, so both invocations build the same graph.
        "order-stage"
    }
}

fn graph(deploy: Option<CancellationToken>) -> Result<WarGraph, Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            FieldName::new("order")?,
            DispatchRule::LastWrite,
            None,
            true,
        ),
        FieldSpec::new(
            FieldName::new("stage")?,
            DispatchRule::LastWrite,
            None,
            false,
        ),
        FieldSpec::new(FieldName::new("log")?, DispatchRule::Append, None, false),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    let mut previous = START;
    for name in STAGES {
        let deploy = if name == "charge" {
            deploy.clone()
        } else {
            None
        };
        graph.add_node(name, NodeSpec::function(Stage { name, deploy }));
        graph.add_edge(previous, name);
        previous = name;
    }
    graph.add_edge(previous, END);
    Ok(graph)
}

fn db_path(args: &[String]) -> PathBuf {
    args.iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("aegis-durable-resume.sqlite"))
}

fn remove_store(path: &std::path::Path) -> std::io::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = db_path(&args);
    let resume = args.iter().any(|a| a == "--resume");

    if !resume {
        remove_store(&path)?;
        let store = Arc::new(SqliteWaypointStore::open(&path).await?);
        let token = CancellationToken::new();
        let engine = WarEngine::new(store).with_cancellation(token.clone());
        println!("starting thread `{THREAD}` in {}", path.display());
        let outcome = engine
            .start(&graph(Some(token))?, THREAD, json!({"order": 42}))
            .await?;
        match outcome {
            RunOutcome::Halted { vanguard, .. } => {
                let pending: Vec<&str> = vanguard.iter().map(NodeId::as_str).collect();
                println!("halted; `{}` is pending.", pending.join("`, `"));
                println!("the process exits now. resume it with:");
                println!(
                    "  cargo run --example durable_resume -- --resume --db {}",
                    path.display()
                );
            }
            other => println!("the run ended without halting: {}", other.name()),
        }
        return Ok(());
    }

    let store = Arc::new(SqliteWaypointStore::open(&path).await?);
    let engine = WarEngine::new(store.clone());
    println!("resuming thread `{THREAD}` from {}", path.display());
    let outcome = engine.resume(&graph(None)?, THREAD, None).await?;
    println!("{}: {}", outcome.name(), outcome.state().to_json());

    println!("\nthe thread's waypoints (and the bytes each row takes):");
    let history = store.history(THREAD).await?;
    let rows = store.row_stats(THREAD).await?;
    for (w, row) in history.iter().zip(&rows) {
        println!(
            "  #{:<2} superstep {} {:<9} {:>5} bytes ({})",
            w.seq,
            w.superstep,
            w.status.name(),
            row.payload_bytes,
            if row.snapshot { "snapshot" } else { "delta" },
        );
    }
    Ok(())
}
