//! A rolling deploy across real worker processes, on SQLite and on the real
//! PostgreSQL server.
//!
//! v1 workers (this binary, re-executed with `AEGIS_DEPLOY_WORKER`) park
//! threads at two parleys: `review` and `legal`. They get SIGTERM and exit
//! 0; v2 workers start, whose graph adds a node after `review` and no
//! longer has `legal`. Every thread is answered. Checked:
//!
//! - every thread waiting at `review` completes on v2, with the move
//!   recorded (its status names v1's fingerprint, its state has v2's new
//!   node's write), after exactly one claim by v1 and one by v2;
//! - every thread waiting at `legal` stays queued and pinned to v1, its
//!   waiting reason naming the removed node, listed by `Client::pinned`,
//!   with no claim at all while it waits (no claim/release churn);
//! - a v1 worker started again takes the pinned threads answered so far and
//!   completes them on v1 (a rollback, or a drain by the old version);
//! - a v3 worker whose migration maps `legal` to `review` takes the rest,
//!   and the migration is recorded in their status and history.
//!
//! `cargo test --all-features --test rolling_deploy` (about half a minute).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::EngineLimits;
use aegis::graph::Migration;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyRequest;
use aegis::graph::ParleyResponse;
use aegis::prelude::*;
use aegis::waypoint::PostgresOptions;
use aegis::waypoint::WaypointStatus;
use aegis::worker::{
    Client, PostgresRunQueue, RunQueue, RunState, SqliteRunQueue, WorkerConfig, WorkerPool,
};
use serde_json::json;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Turns this binary into a worker of the version it names.
const WORKER_ENV: &str = "AEGIS_DEPLOY_WORKER";
/// `sqlite:<path>` or `postgres:<schema>`.
const QUEUE_ENV: &str = "AEGIS_DEPLOY_QUEUE";
const GRAPH: &str = "review";
/// Each phase's bound; a phase takes a second or two.
const BOUND: Duration = Duration::from_secs(60);

fn main() {
    if let Ok(version) = std::env::var(WORKER_ENV) {
        worker_main(&version);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("aegis-rolling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _dir = RemoveDir(dir.clone());
    let sqlite = format!("sqlite:{}", dir.join("queue.sqlite").display());
    rt.block_on(rolling_deploy(&sqlite, 1));
    println!("rolling_deploy: sqlite ok");
    let schema = format!("aegis_rolling_{}", std::process::id());
    let _schema = SchemaGuard(schema.clone());
    rt.block_on(rolling_deploy(&format!("postgres:{schema}"), 2));
    println!("rolling_deploy: postgres ok");
}

fn field(name: &str, rule: DispatchRule, required: bool) -> FieldSpec {
    FieldSpec::new(FieldName::new(name).unwrap(), rule, None, required)
}

/// A node that parleys, then logs the answer under its own name.
fn ask(kind: &'static str) -> NodeSpec {
    NodeSpec::from_fn(kind, move |_, ctx| {
        Box::pin(async move {
            let Some(answer) = ctx.parley_response() else {
                return Ok(Directive::parley(ParleyRequest::new(format!("{kind}?"))));
            };
            let mut d = StateDelta::new();
            d.set("log", format!("{kind}: {}", answer.value))?;
            Ok(d.into())
        })
    })
}

/// Logs its kind.
fn mark(kind: &'static str) -> NodeSpec {
    NodeSpec::from_fn(kind, move |_, _| {
        Box::pin(async move {
            let mut d = StateDelta::new();
            d.set("log", kind)?;
            Ok(d.into())
        })
    })
}

/// v1: `route` sends the thread to `review` or `legal` by its input; each
/// parleys. v2: `notify` after `review`, and no `legal`. v3: v2 with a
/// migration that carries threads waiting at v1's `legal` to `review`.
fn graph(version: &str) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        field("path", DispatchRule::LastWrite, true),
        field("log", DispatchRule::Append, false),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let with_legal = version == "v1";
    g.add_node(
        "route",
        NodeSpec::from_fn("route", |state, _| {
            Box::pin(async move {
                let legal = state.get("path").and_then(|p| p.as_str()) == Some("legal");
                let target = if legal { "legal" } else { "review" };
                Ok(Directive::goto(StateDelta::new(), target))
            })
        }),
    )
    .add_node("review", ask("review"))
    .add_edge(START, "route")
    .add_edge("route", "review");
    if with_legal {
        g.add_node("legal", ask("legal"))
            .add_edge("route", "legal")
            .add_edge("legal", END)
            .add_edge("review", END);
    } else {
        g.add_node("notify", mark("notify"))
            .add_edge("review", "notify")
            .add_edge("notify", END);
    }
    if version == "v3" {
        g.with_migration(
            Migration::new("legal-to-review", graph("v1").fingerprint())
                .map_node("legal", "review"),
        );
    }
    g
}

async fn connect(spec: &str) -> Arc<dyn RunQueue> {
    if let Some(path) = spec.strip_prefix("sqlite:") {
        return Arc::new(SqliteRunQueue::open(path).await.unwrap());
    }
    let schema = spec.strip_prefix("postgres:").unwrap();
    Arc::new(
        PostgresRunQueue::connect_with(
            &pg_url(),
            PostgresOptions::default()
                .with_schema(schema)
                .with_pool_size(4),
        )
        .await
        .unwrap(),
    )
}

fn pg_url() -> String {
    std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
}

/// The worker process: a pool of `version`'s graph until SIGTERM or its
/// stdin closes, then exit 0 with its leases released.
fn worker_main(version: &str) {
    let spec = std::env::var(QUEUE_ENV).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let stop = aegis::worker::shutdown_signal().unwrap();
        let on_eof = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            on_eof.cancel();
        });
        let queue = connect(&spec).await;
        let ttl = Duration::from_secs(2);
        WorkerPool::new(queue, WarEngine::new)
            .with_config(
                WorkerConfig::default()
                    .with_worker_id(format!("{version}-{}", std::process::id()))
                    .with_lease_ttl(ttl)
                    .with_poll_interval(Duration::from_millis(100))
                    .with_shutdown_grace(Duration::from_secs(2)),
            )
            .register(GRAPH, graph(version))
            .unwrap()
            .run(stop)
            .await
            .unwrap();
    });
}

/// Worker processes of one version; killed when dropped (also on a panic).
struct Workers(Vec<Child>);

impl Workers {
    fn start(spec: &str, version: &str, n: usize) -> Self {
        Workers(
            (0..n)
                .map(|_| {
                    Command::new(std::env::current_exe().unwrap())
                        .env(WORKER_ENV, version)
                        .env(QUEUE_ENV, spec)
                        .env("RUST_LOG", "off")
                        .stdin(Stdio::piped())
                        .stdout(Stdio::null())
                        .stderr(Stdio::inherit())
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }

    /// SIGTERM to each; each must exit 0 (its runs halted and released).
    fn terminate(mut self) {
        for child in &mut self.0 {
            let pid = child.id().to_string();
            assert!(
                Command::new("kill")
                    .args(["-TERM", &pid])
                    .status()
                    .unwrap()
                    .success()
            );
        }
        for child in &mut self.0 {
            let status = child.wait().unwrap();
            assert!(status.success(), "a worker exited with {status}");
        }
        self.0.clear();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until every thread's state satisfies `done`, at most [`BOUND`].
async fn wait_all(client: &Client, threads: &[String], done: impl Fn(RunState) -> bool) {
    let started = Instant::now();
    for t in threads {
        let left = BOUND.saturating_sub(started.elapsed());
        let s = client.wait_until(t, left, &done).await.unwrap();
        assert!(done(s.state), "{t}: {s:?}");
    }
}

async fn log_of(client: &Client, thread: &str) -> serde_json::Value {
    let latest = client.latest(thread).await.unwrap().unwrap();
    assert_eq!(latest.status, WaypointStatus::Completed, "{thread}");
    latest.state.get("log").cloned().unwrap()
}

async fn rolling_deploy(spec: &str, per_version: usize) {
    let queue = connect(spec).await;
    let client = Client::new(queue);
    let (v1, v2, v3) = (
        graph("v1").fingerprint(),
        graph("v2").fingerprint(),
        graph("v3").fingerprint(),
    );
    assert_eq!(v2, v3, "a migration is not part of the fingerprint");
    let review: Vec<String> = (0..8).map(|i| format!("review-{i}")).collect();
    let legal: Vec<String> = (0..4).map(|i| format!("legal-{i}")).collect();

    // v1 parks every thread, then is shut down by the deploy.
    let old = Workers::start(spec, "v1", per_version);
    for (t, path) in review
        .iter()
        .map(|t| (t, "review"))
        .chain(legal.iter().map(|t| (t, "legal")))
    {
        client
            .submit(GRAPH, t, json!({ "path": path }))
            .await
            .unwrap();
    }
    let all: Vec<String> = review.iter().chain(&legal).cloned().collect();
    wait_all(&client, &all, |s| s == RunState::AwaitingInput).await;
    old.terminate();

    // v2 takes over; every thread but the last two is answered.
    let new = Workers::start(spec, "v2", per_version);
    let (answered, later) = legal.split_at(2);
    for t in review.iter().chain(answered) {
        client
            .answer(t, ParleyResponse::new(json!("yes")))
            .await
            .unwrap();
    }
    wait_all(&client, &review, |s| s == RunState::Completed).await;
    for t in &review {
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.fingerprint.as_deref(), Some(v2.as_str()), "{t}");
        assert_eq!(s.previous_fingerprint.as_deref(), Some(v1.as_str()), "{t}");
        assert_eq!(
            log_of(&client, t).await,
            json!(["review: \"yes\"", "notify"])
        );
        let claims = client.attempts(t).await.unwrap();
        let by: Vec<_> = claims.iter().map(|a| &a.worker_id[..2]).collect();
        assert_eq!(by, ["v1", "v2"], "{t}: {claims:?}");
    }

    // The `legal` threads stay pinned to v1 with the reason, answered or
    // not (those awaiting an answer are judged too), and unclaimed.
    let started = Instant::now();
    loop {
        let pinned = client.pinned(100).await.unwrap();
        let judged = pinned.len() == legal.len()
            && pinned
                .iter()
                .all(|p| p.verdicts.iter().any(|v| !v.compatible));
        if judged {
            break;
        }
        assert!(started.elapsed() < BOUND, "not judged: {pinned:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Several poll intervals of the v2 workers later, still no claim.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for t in &legal {
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.fingerprint.as_deref(), Some(v1.as_str()), "{t}");
        assert_eq!(client.attempts(t).await.unwrap().len(), 1, "{t}: churn");
    }
    for t in answered {
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.state, RunState::Queued, "{t}");
        let reason = s.waiting_reason.unwrap();
        assert!(reason.contains(&v1) && reason.contains(&v2), "{reason}");
        assert!(
            reason.contains("node `legal`, which this graph no longer has"),
            "{reason}"
        );
    }

    // A v1 worker started again (a rollback, or the old version draining)
    // takes the answered ones: they are pinned to its fingerprint.
    let back = Workers::start(spec, "v1", 1);
    wait_all(&client, answered, |s| s == RunState::Completed).await;
    back.terminate();
    for t in answered {
        assert_eq!(log_of(&client, t).await, json!(["legal: \"yes\""]));
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.fingerprint.as_deref(), Some(v1.as_str()), "{t}");
    }

    // The rest are answered with only v2 live: still pinned. A v3 worker,
    // whose migration maps `legal` to `review`, carries them.
    for t in later {
        client
            .answer(t, ParleyResponse::new(json!("yes")))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for t in later {
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.state, RunState::Queued, "{t}: {s:?}");
    }
    let migrating = Workers::start(spec, "v3", 1);
    wait_all(&client, later, |s| s == RunState::Completed).await;
    for t in later {
        let s = client.status(t).await.unwrap().unwrap();
        assert_eq!(s.fingerprint.as_deref(), Some(v3.as_str()), "{t}");
        assert_eq!(s.migration.as_deref(), Some("legal-to-review"), "{t}");
        assert_eq!(s.previous_fingerprint.as_deref(), Some(v1.as_str()), "{t}");
        assert_eq!(
            log_of(&client, t).await,
            json!(["review: \"yes\"", "notify"])
        );
        let claims = client.attempts(t).await.unwrap();
        let by: Vec<_> = claims.iter().map(|a| &a.worker_id[..2]).collect();
        assert_eq!(by, ["v1", "v3"], "{t}: {claims:?}");
        let history = client.history(t).await.unwrap();
        let moved = history.last().unwrap().previous_graph.clone().unwrap();
        assert_eq!(moved.migration.as_deref(), Some("legal-to-review"));
        assert_eq!(
            moved.mapped_nodes,
            [(NodeId::new("legal"), NodeId::new("review"))]
        );
    }
    assert!(client.pinned(100).await.unwrap().is_empty());
    migrating.terminate();
    new.terminate();
}

struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Drops the PostgreSQL schema when dropped (also on a panic).
struct SchemaGuard(String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let schema = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                use std::str::FromStr;
                let config = tokio_postgres::Config::from_str(&pg_url()).unwrap();
                let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(conn);
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await;
            });
        })
        .join();
    }
}
