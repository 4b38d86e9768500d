//! The operator's console over a worker fleet: runs, pinned fingerprints,
//! provider health, and the actions an operator takes (answer a parley,
//! cancel, release a quarantined run, retry now).
//!
//! ```text
//! cargo run --example console --features console -- --demo          # a demo fleet, served until Ctrl-C
//! cargo run --example console --features console -- fleet.sqlite    # a SQLite queue file
//! cargo run --example console --features console,postgres -- postgres://user@host/db
//! ```
//!
//! Options: `--addr 127.0.0.1:8089` (default; port 0 picks a free port),
//! `--schema NAME` (the PostgreSQL schema of the queue; default `public`),
//! `--token TOKEN` (required for a non-loopback address; also read from
//! `AEGIS_CONSOLE_TOKEN`), `--once` (print the address and exit: what CI
//! checks). With no arguments it prints this usage and exits.

mod demo;

use aegis::console::{Console, ConsoleError};
use aegis::worker::{RunQueue, SqliteRunQueue};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

const USAGE: &str = "usage: console (--demo | FILE.sqlite | postgres://URL [--schema NAME]) [--addr HOST:PORT] [--token TOKEN] [--once]";

fn arg_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The positional argument: the queue to read.
fn source(args: &[String]) -> Option<&String> {
    let mut skip = false;
    args.iter().skip(1).find(|a| {
        if skip {
            skip = false;
            return false;
        }
        if *a == "--addr" || *a == "--token" || *a == "--schema" {
            skip = true;
            return false;
        }
        !a.starts_with("--")
    })
}

async fn open(source: &str, schema: Option<&str>) -> Result<Arc<dyn RunQueue>, demo::DemoError> {
    #[cfg(not(feature = "postgres"))]
    let _ = schema;
    if source.starts_with("postgres://") || source.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let options =
                aegis::waypoint::PostgresOptions::default().with_schema(schema.unwrap_or("public"));
            let queue = aegis::worker::PostgresRunQueue::connect_with(source, options).await?;
            return Ok(Arc::new(queue));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(
            "a PostgreSQL queue needs the `postgres` feature: add --features postgres".into(),
        );
    }
    if !std::path::Path::new(source).exists() {
        return Err(format!("no such SQLite file: {source}").into());
    }
    Ok(Arc::new(SqliteRunQueue::open(source).await?))
}

/// Removes the demo's SQLite file (and its WAL files) however `main` ends.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            for suffix in ["", "-wal", "-shm"] {
                let mut f = file.clone().into_os_string();
                f.push(suffix);
                let _ = std::fs::remove_file(f);
            }
        }
    }
}

async fn run(args: &[String]) -> Result<(), demo::DemoError> {
    let demo_mode = args.iter().any(|a| a == "--demo");
    let source = source(args).cloned();
    if !demo_mode && source.is_none() {
        println!("{USAGE}");
        return Ok(());
    }
    let addr: SocketAddr = arg_after(args, "--addr")
        .unwrap_or_else(|| "127.0.0.1:8089".to_string())
        .parse()?;
    let token = arg_after(args, "--token").or_else(|| std::env::var("AEGIS_CONSOLE_TOKEN").ok());
    let once = args.iter().any(|a| a == "--once");
    // Refuse a public address without a token before building anything.
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(ConsoleError::NonLoopbackWithoutToken { addr }.into());
    }

    let mut cleanup = RemoveOnDrop(None);
    let (queue, fleet): (Arc<dyn RunQueue>, _) = if demo_mode {
        let file =
            std::env::temp_dir().join(format!("aegis-console-demo-{}.sqlite", std::process::id()));
        cleanup.0 = Some(file.clone());
        println!("building the demo fleet in {} ...", file.display());
        let fleet = demo::build(&file).await?;
        (fleet.queue.clone(), Some(fleet))
    } else {
        let schema = arg_after(args, "--schema");
        let source = source.as_deref().unwrap_or_default();
        (open(source, schema.as_deref()).await?, None)
    };
    let mut console = Console::new(queue);
    if let Some(token) = token {
        console = console.with_token(token);
    }
    let server = console.bind(addr).await?;
    println!("console: {}", server.url());
    if !once {
        println!("Ctrl-C (or SIGTERM) stops it.");
        aegis::worker::shutdown_signal()?.cancelled().await;
    }
    server.shutdown().await?;
    if let Some(fleet) = fleet {
        fleet.stop().await?;
    }
    drop(cleanup);
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("console: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
