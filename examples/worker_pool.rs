//! A worker fleet: runs are submitted to a queue, workers claim them under
//! leases, one worker dies, and another takes its threads over from their
//! last waypoint.
//!
//! ```text
//! cargo run --example worker_pool                                   # one process, SQLite
//! cargo run --example worker_pool --features postgres -- --workers 3  # 3 processes, PostgreSQL
//! ```
//!
//! Without flags, two worker pools share one SQLite queue in this process;
//! one is stopped dead (no release, no heartbeat) and the other takes over
//! its runs once their leases expire. With `--workers N` (feature
//! `postgres`), N worker processes (this program, re-executed) share a
//! queue in a fresh schema of the local PostgreSQL (`AEGIS_PG_URL`, default
//! `host=127.0.0.1 user=postgres dbname=test`); one is SIGKILLed mid-run,
//! and the others stop on SIGTERM at the end (`shutdown_signal`).

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use aegis::state::FieldName;
use aegis::worker::{Client, RunQueue, RunState, SqliteRunQueue, WorkerConfig, WorkerPool};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 6;
const LEASE_TTL: Duration = Duration::from_secs(1);

/// Four steps of 250 ms, each adding 1 to `done`.
fn graph() -> Result<WarGraph, Box<dyn std::error::Error>> {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("done")?,
        DispatchRule::Sum,
        Some(json!(0)),
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let steps = ["fetch", "parse", "score", "store"];
    for step in steps {
        g.add_node(
            step,
            NodeSpec::from_fn(step, |_, _| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let mut d = StateDelta::new();
                    d.set("done", 1)?;
                    Ok(d.into())
                })
            }),
        );
    }
    g.add_edge(START, steps[0])
        .add_edge(steps[0], steps[1])
        .add_edge(steps[1], steps[2])
        .add_edge(steps[2], steps[3])
        .add_edge(steps[3], END);
    Ok(g)
}

fn pool(
    queue: Arc<dyn RunQueue>,
    id: &str,
    max_runs: usize,
) -> Result<WorkerPool, Box<dyn std::error::Error>> {
    Ok(WorkerPool::new(queue, WarEngine::new)
        .with_config(
            WorkerConfig::default()
                .with_worker_id(id)
                .with_max_runs(max_runs)
                .with_lease_ttl(LEASE_TTL)
                .with_poll_interval(Duration::from_millis(200)),
        )
        .register("pipeline", graph()?)?)
}

/// Prints the pool's claims and releases (its `tracing` events).
fn log_claims() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("aegis_runtime::worker=info")
        .with_target(false)
        .with_ansi(false)
        .without_time()
        .try_init();
}

async fn report(client: &Client, threads: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let mut finals = Vec::new();
    for thread in threads {
        finals.push(client.wait(thread, Duration::from_secs(60)).await?);
    }
    println!("\nfinal outcomes:");
    for (thread, status) in threads.iter().zip(finals) {
        let done = client
            .latest(thread)
            .await?
            .and_then(|w| w.state.get("done").cloned())
            .unwrap_or_default();
        let attempts: Vec<String> = client
            .attempts(thread)
            .await?
            .iter()
            .map(|a| format!("epoch {} on {}: {}", a.epoch, a.worker_id, a.outcome))
            .collect();
        println!(
            "  {thread}: {} (done = {done}; {})",
            status.state,
            attempts.join(", ")
        );
    }
    Ok(())
}

async fn wait_for_claims(
    client: &Client,
    threads: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    for thread in threads {
        client
            .wait_until(thread, Duration::from_secs(30), |s| s != RunState::Queued)
            .await?;
    }
    Ok(())
}

async fn embedded() -> Result<(), Box<dyn std::error::Error>> {
    log_claims();
    let path =
        std::env::temp_dir().join(format!("aegis-worker-pool-{}.sqlite", std::process::id()));
    let queue: Arc<dyn RunQueue> = Arc::new(SqliteRunQueue::open(&path).await?);
    let client = Client::new(queue.clone());
    println!("SQLite queue at {}", path.display());
    // Worker "a" starts alone and claims every run.
    let a = tokio::spawn(pool(queue.clone(), "a", RUNS)?.run(CancellationToken::new()));
    let threads: Vec<String> = (0..RUNS).map(|i| format!("job-{i}")).collect();
    for thread in &threads {
        client.submit("pipeline", thread, json!({})).await?;
    }
    wait_for_claims(&client, &threads).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // "a" dies mid-run: no release, no more heartbeats.
    a.abort();
    println!("\nkilled worker a; its leases expire in {LEASE_TTL:?}, then b takes over\n");
    let stop = CancellationToken::new();
    let b = tokio::spawn(pool(queue.clone(), "b", RUNS)?.run(stop.clone()));
    report(&client, &threads).await?;
    stop.cancel();
    b.await??;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}

#[cfg(feature = "postgres")]
mod fleet {
    use super::*;
    use aegis::waypoint::PostgresOptions;
    use aegis::worker::PostgresRunQueue;
    use std::io::Read;
    use std::process::{Child, Command, Stdio};

    pub(super) fn url() -> String {
        std::env::var("AEGIS_PG_URL")
            .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".to_string())
    }

    async fn queue(schema: &str) -> Result<Arc<PostgresRunQueue>, Box<dyn std::error::Error>> {
        Ok(Arc::new(
            PostgresRunQueue::connect_with(&url(), PostgresOptions::default().with_schema(schema))
                .await?,
        ))
    }

    /// A worker process: runs until SIGTERM / SIGINT or its stdin closes,
    /// then halts its runs within `shutdown_grace` and releases their
    /// leases.
    pub(super) async fn worker(id: &str, schema: &str) -> Result<(), Box<dyn std::error::Error>> {
        log_claims();
        let stop = aegis::worker::shutdown_signal()?;
        let on_eof = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            on_eof.cancel();
        });
        let queue: Arc<dyn RunQueue> = queue(schema).await?;
        pool(queue, id, 2)?.run(stop).await?;
        Ok(())
    }

    /// Kills the workers and drops the schema, however `main` ends.
    struct Cleanup {
        children: Vec<(String, Child)>,
        schema: String,
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for (_, child) in &mut self.children {
                let _ = child.kill();
                let _ = child.wait();
            }
            let schema = self.schema.clone();
            let _ = std::thread::spawn(move || -> Result<(), String> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                rt.block_on(async {
                    use std::str::FromStr;
                    let config =
                        tokio_postgres::Config::from_str(&url()).map_err(|e| e.to_string())?;
                    let (client, conn) = config
                        .connect(tokio_postgres::NoTls)
                        .await
                        .map_err(|e| e.to_string())?;
                    tokio::spawn(conn);
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .await
                        .map_err(|e| e.to_string())
                })
            })
            .join();
        }
    }

    pub(super) async fn run(workers: usize) -> Result<(), Box<dyn std::error::Error>> {
        let schema = format!("aegis_example_{}", std::process::id());
        let queue = queue(&schema).await?;
        let client = Client::new(queue.clone());
        let mut cleanup = Cleanup {
            children: Vec::new(),
            schema: schema.clone(),
        };
        for i in 1..=workers {
            let id = format!("w{i}");
            let child = Command::new(std::env::current_exe()?)
                .args(["--worker", &id, "--schema", &schema])
                .stdin(Stdio::piped())
                .spawn()?;
            cleanup.children.push((id, child));
        }
        println!("{workers} worker processes on schema {schema}");
        let threads: Vec<String> = (0..RUNS).map(|i| format!("job-{i}")).collect();
        for thread in &threads {
            client.submit("pipeline", thread, json!({})).await?;
        }
        wait_for_claims(&client, &threads).await?;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (victim, mut child) = cleanup.children.remove(0);
        let mut held = Vec::new();
        for thread in &threads {
            if let Some(s) = client.status(thread).await?
                && s.worker_id.as_deref() == Some(victim.as_str())
            {
                held.push(thread.clone());
            }
        }
        child.kill()?;
        child.wait()?;
        println!("\nSIGKILLed {victim} holding {held:?}; takeover after the {LEASE_TTL:?} lease\n");
        report(&client, &threads).await?;
        // The survivors stop gracefully: SIGTERM halts their runs, releases
        // the leases and exits 0.
        for (id, mut child) in cleanup.children.drain(..) {
            let pid = child.id().to_string();
            if !Command::new("kill")
                .args(["-TERM", &pid])
                .status()?
                .success()
            {
                child.kill()?;
            }
            println!("{id}: SIGTERM, {}", child.wait()?);
        }
        Ok(())
    }
}

fn arg_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let workers = arg_after(&args, "--workers");
    #[cfg(feature = "postgres")]
    {
        if let (Some(id), Some(schema)) =
            (arg_after(&args, "--worker"), arg_after(&args, "--schema"))
        {
            return fleet::worker(&id, &schema).await;
        }
        if let Some(n) = &workers {
            return fleet::run(n.parse()?).await;
        }
    }
    if workers.is_some() {
        return Err("--workers needs the `postgres` feature: add --features postgres".into());
    }
    embedded().await
}
