//! A worker process whose network to PostgreSQL goes dark: a TCP proxy in
//! this test stops forwarding without closing (no RST, no FIN), as a switch
//! failure or a firewall change does.
//!
//! The dark worker (this binary, re-executed) holds four leases when the
//! proxy goes dark. Checked: it gives every lease up within `lease_ttl` of
//! its last renewal (its own lease clock; the figure is printed), before
//! or as the server's lease expires; a healthy worker takes the four threads
//! over and completes them; none of the dark worker's writes lands after
//! the blackhole (every fenced write is logged by epoch and worker); and
//! when the light comes back, the dark worker claims new work, its slots
//! free.
//!
//! `cargo test --all-features --test blackhole` (about ten seconds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fleet/mod.rs"]
mod fleet;

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use aegis::waypoint::PostgresOptions;
use aegis::worker::{Client, PostgresRunQueue, RunQueue, RunState, WorkerConfig, WorkerPool};
use fleet::{Recording, SchemaGuard, admin, prepare_write_log, unique_schema, url};
use serde_json::json;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WORKER_ENV: &str = "AEGIS_BLACKHOLE_WORKER";
const TTL: Duration = Duration::from_secs(2);

fn main() {
    if let Ok(schema) = std::env::var(WORKER_ENV) {
        worker_main(&schema);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(a_dark_worker_gives_its_leases_up());
    println!("blackhole: ok");
}

/// `START -> work -> END`: `work` takes a minute in a process that runs
/// with `AEGIS_BLACKHOLE_SLOW` (the dark worker, so its runs are in flight
/// when the network goes), a moment anywhere else.
fn graph() -> WarGraph {
    let mut g = WarGraph::new(
        BattlefieldSchema::new(vec![FieldSpec::new(
            FieldName::new("done").unwrap(),
            DispatchRule::LastWrite,
            None,
            false,
        )]),
        EngineLimits::default(),
    );
    g.add_node(
        "start",
        NodeSpec::from_fn("start", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    )
    .add_node(
        "work",
        NodeSpec::from_fn("work", |_, _| {
            Box::pin(async {
                let slow = std::env::var_os("AEGIS_BLACKHOLE_SLOW").is_some();
                let pause = if slow { 60_000 } else { 10 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let mut d = StateDelta::new();
                d.set("done", true)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "start")
    .add_edge("start", "work")
    .add_edge("work", END);
    g
}

/// A worker on `schema`, at the database named by `AEGIS_BLACKHOLE_URL`;
/// logs the pool's events on stdout for the parent to read.
fn worker_main(schema: &str) {
    tracing_subscriber::fmt()
        .with_env_filter("aegis_runtime::worker=info")
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .init();
    let database = std::env::var("AEGIS_BLACKHOLE_URL").unwrap();
    let id = std::env::var("AEGIS_BLACKHOLE_ID").unwrap();
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
        let inner = Arc::new(
            PostgresRunQueue::connect_with(
                &database,
                PostgresOptions::default()
                    .with_schema(schema)
                    .with_pool_size(8),
            )
            .await
            .unwrap(),
        );
        // The write log goes straight to the server: it records what
        // landed, whatever the worker's own connections do.
        let queue: Arc<dyn RunQueue> = Arc::new(Recording {
            inner,
            log: admin().await,
            schema: schema.to_string(),
        });
        WorkerPool::new(queue, WarEngine::new)
            .with_config(
                WorkerConfig::default()
                    .with_worker_id(id)
                    .with_max_runs(4)
                    .with_lease_ttl(TTL)
                    .with_poll_interval(Duration::from_millis(100))
                    .with_shutdown_grace(Duration::from_millis(500)),
            )
            .register("blackhole", graph())
            .unwrap()
            .run(stop)
            .await
            .unwrap();
    });
}

/// A worker process and the lines it printed, each with when it came.
struct Worker {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Worker {
    fn start(schema: &str, id: &str, database: &str, slow: bool) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(WORKER_ENV, schema)
            .env("AEGIS_BLACKHOLE_URL", database)
            .env("AEGIS_BLACKHOLE_ID", id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if slow {
            command.env("AEGIS_BLACKHOLE_SLOW", "1");
        }
        let mut child = command.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Worker { child, lines }
    }

    /// When the worker said it gave the lease of `thread` up, if it did.
    fn gave_up(&self, thread: &str) -> Option<Instant> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|(_, l)| l.contains("lease lost") && l.contains(thread))
            .map(|(at, _)| *at)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Forwards connections to PostgreSQL until `dark`; then holds every byte
/// either way, and closes nothing.
async fn proxy(dark: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let dark = dark.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect("127.0.0.1:5432").await else {
                    return;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, dark.clone()));
                tokio::spawn(pipe(sr, cw, dark));
            });
        }
    });
    url().replace("port=5432", &format!("port={port}"))
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    dark: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while dark.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // A read that raced the blackhole is held too.
        while dark.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn a_dark_worker_gives_its_leases_up() {
    let schema = unique_schema("blackhole");
    let _drop_schema = SchemaGuard(schema.clone());
    let queue = Arc::new(
        PostgresRunQueue::connect_with(&url(), PostgresOptions::default().with_schema(&schema))
            .await
            .unwrap(),
    );
    prepare_write_log(&schema).await;
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    let dark = Arc::new(AtomicBool::new(false));
    let proxied = proxy(dark.clone()).await;

    let threads: Vec<String> = (0..4).map(|i| format!("dark-{i}")).collect();
    let dark_worker = Worker::start(&schema, "dark", &proxied, true);
    for t in &threads {
        client.submit("blackhole", t, json!({})).await.unwrap();
    }
    let started = Instant::now();
    for t in &threads {
        let s = client
            .wait_until(t, Duration::from_secs(30), |s| s == RunState::Running)
            .await
            .unwrap();
        assert_eq!(s.worker_id.as_deref(), Some("dark"), "{t}");
    }
    // Every thread is in its minute-long node, with a renewal or two done.
    tokio::time::sleep(TTL).await;

    dark.store(true, Ordering::SeqCst);
    let blackhole = Instant::now();
    let admin = admin().await;
    let went_dark: f64 = admin
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .unwrap()
        .get(0);

    // The dark worker gives every lease up on its own clock.
    let bound = Duration::from_secs(30);
    let mut given_up = Vec::new();
    for t in &threads {
        let at = loop {
            if let Some(at) = dark_worker.gave_up(t) {
                break at;
            }
            assert!(
                blackhole.elapsed() < bound,
                "{t}: the lease was never given up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        given_up.push(at.saturating_duration_since(blackhole));
    }
    let slowest = given_up.iter().max().copied().unwrap_or_default();
    println!(
        "blackhole: the dark worker gave its 4 leases up {:?} after the network went dark (lease_ttl {TTL:?}; heartbeat every {:?})",
        given_up,
        TTL / 3
    );
    // Within the lease (renewed at most a heartbeat before the dark),
    // plus scheduling slack; never the kernel's minutes.
    assert!(slowest <= TTL + Duration::from_millis(500), "{given_up:?}");

    // A healthy worker takes the threads over and completes them.
    let healthy = Worker::start(&schema, "healthy", &url(), false);
    for t in &threads {
        let s = client
            .wait_until(t, Duration::from_secs(30), |s| s.is_final())
            .await
            .unwrap();
        assert_eq!(s.state, RunState::Completed, "{t}: {s:?}");
        assert_eq!(s.worker_id, None);
        let latest = client.latest(t).await.unwrap().unwrap();
        assert_eq!(latest.state.get("done"), Some(&json!(true)), "{t}");
    }
    // Nothing the dark worker wrote landed after the network went dark.
    let late: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".fleet_writes \
                 WHERE worker_id = 'dark' AND extract(epoch FROM written_at)::float8 > $1"
            ),
            &[&went_dark],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        late, 0,
        "a write of the dark worker landed after the blackhole"
    );
    let regressions: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT epoch, lag(epoch) OVER \
                 (PARTITION BY thread_id ORDER BY seq) AS prev FROM \"{schema}\".fleet_writes) w \
                 WHERE epoch < prev"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(regressions, 0, "a stale epoch wrote after a newer one");

    // The light comes back: the dark worker's slots are free, and it claims
    // new work. (A claim the killed healthy worker sent just before it died
    // may still take the thread first; its lease then runs out.)
    drop(healthy);
    dark.store(false, Ordering::SeqCst);
    client
        .submit("blackhole", "after", json!({}))
        .await
        .unwrap();
    let light = Instant::now();
    loop {
        let claims = client.attempts("after").await.unwrap();
        if claims.iter().any(|a| a.worker_id == "dark") {
            break;
        }
        assert!(
            light.elapsed() < bound,
            "the dark worker never claimed again: {claims:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(dark_worker);
    println!("blackhole: done in {:?}", started.elapsed());
}
