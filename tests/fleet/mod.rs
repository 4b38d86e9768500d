//! The worker fleet's test harness, shared by `tests/worker_fleet.rs` and
//! `benches/worker_pool.rs`: the graph every run executes, a run queue that
//! records every waypoint write with the epoch that made it, and the worker
//! process (the test or bench binary re-executed with `AEGIS_FLEET_WORKER`).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use aegis::error::StoreError;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyRequest;
use aegis::graph::ParleyResponse;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use aegis::waypoint::PostgresOptions;
use aegis::waypoint::Waypoint;
use aegis::worker::{
    AttemptInfo, Claim, Lease, PinnedRun, PostgresRunQueue, Release, Renewal, RunQueue, RunStatus,
    Submitted, Verdict, WorkerConfig, WorkerError, WorkerInfo, WorkerPool,
};
use serde_json::{Value, json};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that turns a test binary into a worker.
pub const WORKER_ENV: &str = "AEGIS_FLEET_WORKER";

pub fn url() -> String {
    std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
}

pub async fn admin() -> tokio_postgres::Client {
    let config = tokio_postgres::Config::from_str(&url()).unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap_or_else(|e| {
        panic!("the PostgreSQL test server is unreachable ({e}); start it or set AEGIS_TEST_POSTGRES_URL")
    });
    tokio::spawn(conn);
    client
}

pub fn unique_schema(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("aegis_fleet_{name}_{}_{nanos}", std::process::id())
}

/// The final `count` of every run: start 1, three tasks 10 each, check
/// 100, finish 1000.
pub const EXPECTED_COUNT: u64 = 1131;

/// The final `log` of a run, in merge order.
pub fn expected_log(ask: bool) -> Vec<Value> {
    let check = if ask { "answer-yes" } else { "check" };
    [
        "start", "fan", "task-0", "task-1", "task-2", check, "finish",
    ]
    .iter()
    .map(|s| json!(s))
    .collect()
}

fn field(name: &str, rule: DispatchRule, default: Value) -> FieldSpec {
    FieldSpec::new(FieldName::new(name).unwrap(), rule, Some(default), false)
}

fn step(d: &mut StateDelta, label: &str, count: u64) -> Result<(), StateNodeError> {
    d.set("log", vec![json!(label)])?.set("count", count)?;
    Ok(())
}

/// The fleet graph: a node that fails its first attempt on some threads
/// (retried), a muster of three tasks (one fails its first attempt), a
/// node that parleys when the input asks, and a last node. Each node
/// sleeps `work` so kills land mid-run.
pub fn graph(work: Duration) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        field("count", DispatchRule::Sum, json!(0)),
        field("log", DispatchRule::Append, json!([])),
        field("ask", DispatchRule::LastWrite, json!(false)),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "start",
        NodeSpec::from_fn("start", move |_, ctx| {
            Box::pin(async move {
                tokio::time::sleep(work).await;
                let flaky = ctx.thread_id().bytes().map(u32::from).sum::<u32>() % 4 == 0;
                if flaky && ctx.attempt() == 1 {
                    return Err(StateNodeError::transient("first attempts fail here"));
                }
                let mut d = StateDelta::new();
                step(&mut d, "start", 1)?;
                Ok(d.into())
            })
        }),
    )
    .add_node(
        "fan",
        NodeSpec::from_fn("fan", move |_, _| {
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("log", vec![json!("fan")])?;
                Ok(Directive::muster(
                    d,
                    "task",
                    (0..3).map(|i| (format!("task-{i}"), json!(i))),
                ))
            })
        }),
    )
    .add_worker_template(
        "task",
        NodeSpec::from_fn("task", move |_, ctx| {
            Box::pin(async move {
                tokio::time::sleep(work).await;
                let task = ctx
                    .task()
                    .ok_or_else(|| StateNodeError::permanent("task runs as a task"))?;
                if task.index == 1 && ctx.attempt() == 1 {
                    return Err(StateNodeError::transient("task 1 fails its first attempt"));
                }
                let mut d = StateDelta::new();
                step(&mut d, &task.task_key, 10)?;
                Ok(d.into())
            })
        }),
    )
    .add_node(
        "check",
        NodeSpec::from_fn("check", move |state, ctx| {
            Box::pin(async move {
                let ask = state.get("ask").and_then(Value::as_bool).unwrap_or(false);
                let mut d = StateDelta::new();
                if !ask {
                    step(&mut d, "check", 100)?;
                    return Ok(d.into());
                }
                match ctx.parley_response() {
                    None => Ok(Directive::parley(ParleyRequest::new("go on?"))),
                    Some(r) => {
                        let answer = r.value.as_str().unwrap_or("?").to_string();
                        step(&mut d, &format!("answer-{answer}"), 100)?;
                        Ok(d.into())
                    }
                }
            })
        }),
    )
    .add_node(
        "finish",
        NodeSpec::from_fn("finish", move |_, _| {
            Box::pin(async move {
                tokio::time::sleep(work).await;
                let mut d = StateDelta::new();
                step(&mut d, "finish", 1000)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "start")
    .add_edge("start", "fan")
    .add_edge("task", "check")
    .add_edge("check", "finish")
    .add_edge("finish", END);
    let fast_retry = Aegis::new().with_retry(
        RetryPolicy::default()
            .with_max_attempts(3)
            .with_initial_interval(Duration::from_millis(5))
            .with_backoff_factor(1.0)
            .with_max_interval(Duration::from_millis(5))
            .with_jitter(false)
            .with_retry_on(RetryPredicate::TransientOnly),
    );
    g.set_aegis("start", fast_retry.clone());
    g.set_aegis("task", fast_retry);
    g
}

/// A chain of `nodes` nodes (the benchmark's graph): each sleeps `work`
/// (if any) and adds 1.
pub fn chain_graph(nodes: usize, work: Duration) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![field("count", DispatchRule::Sum, json!(0))]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let names: Vec<&'static str> = (0..nodes)
        .map(|i| &*Box::leak(format!("n{i}").into_boxed_str()))
        .collect();
    for (i, name) in names.iter().enumerate() {
        g.add_node(
            *name,
            NodeSpec::from_fn(name, move |_, _| {
                Box::pin(async move {
                    if !work.is_zero() {
                        tokio::time::sleep(work).await;
                    }
                    let mut d = StateDelta::new();
                    d.set("count", 1)?;
                    Ok(d.into())
                })
            }),
        );
        if i == 0 {
            g.add_edge(START, *name);
        } else {
            g.add_edge(names[i - 1], *name);
        }
    }
    if let Some(last) = names.last() {
        g.add_edge(*last, END);
    }
    g
}

/// A queue that records each successful fenced write (thread, seq, epoch,
/// worker) in `fleet_writes`, so a test can check that no stale epoch ever
/// wrote after a newer one.
pub struct Recording {
    pub inner: Arc<PostgresRunQueue>,
    pub log: tokio_postgres::Client,
    pub schema: String,
}

#[async_trait]
impl RunQueue for Recording {
    fn waypoints(&self) -> Arc<dyn WaypointStore> {
        self.inner.waypoints()
    }
    fn effect_ledger(&self, lease: &Lease) -> Option<Arc<dyn aegis::graph::EffectLedger>> {
        self.inner.effect_ledger(lease)
    }
    async fn put_fenced(&self, lease: &Lease, waypoint: Waypoint) -> Result<(), StoreError> {
        let (thread, seq) = (waypoint.thread_id.to_string(), waypoint.seq as i64);
        self.inner.put_fenced(lease, waypoint).await?;
        let _ = self
            .log
            .execute(
                &format!(
                    "INSERT INTO \"{}\".fleet_writes (thread_id, seq, epoch, worker_id) VALUES ($1, $2, $3, $4)",
                    self.schema
                ),
                &[&thread, &seq, &(lease.epoch as i64), &lease.worker_id],
            )
            .await;
        Ok(())
    }
    async fn submit(&self, g: &str, t: &str, input: Value) -> Result<Submitted, WorkerError> {
        self.inner.submit(g, t, input).await
    }
    async fn register(&self, w: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        self.inner.register(w, ttl).await
    }
    async fn deregister(&self, id: &str) -> Result<(), WorkerError> {
        self.inner.deregister(id).await
    }
    async fn claim(
        &self,
        w: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError> {
        self.inner.claim(w, max, ttl).await
    }
    async fn unjudged(&self, w: &WorkerInfo, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.inner.unjudged(w, max).await
    }
    async fn record_verdict(&self, v: &Verdict) -> Result<(), WorkerError> {
        self.inner.record_verdict(v).await
    }
    async fn pinned(&self, fp: Option<&str>, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.inner.pinned(fp, max).await
    }
    async fn renew(&self, l: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        self.inner.renew(l, ttl).await
    }
    async fn release(&self, l: &Lease, r: Release) -> Result<(), WorkerError> {
        self.inner.release(l, r).await
    }
    async fn abandon(&self, l: &Lease) -> Result<(), WorkerError> {
        self.inner.abandon(l).await
    }
    async fn answer(&self, t: &str, r: ParleyResponse) -> Result<(), WorkerError> {
        self.inner.answer(t, r).await
    }
    async fn requeue(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.requeue(t).await
    }
    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        self.inner.quarantined(max).await
    }
    async fn cancel(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.cancel(t).await
    }
    async fn status(&self, t: &str) -> Result<Option<RunStatus>, WorkerError> {
        self.inner.status(t).await
    }
    async fn attempts(&self, t: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        self.inner.attempts(t).await
    }
    async fn wait_for_change(&self, timeout: Duration) {
        self.inner.wait_for_change(timeout).await
    }
}

pub async fn connect(schema: &str) -> Arc<PostgresRunQueue> {
    Arc::new(
        PostgresRunQueue::connect_with(
            &url(),
            PostgresOptions::default()
                .with_schema(schema)
                .with_pool_size(8),
        )
        .await
        .unwrap(),
    )
}

/// Creates the write log next to the queue's tables.
pub async fn prepare_write_log(schema: &str) {
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS \"{schema}\".fleet_writes (
                 thread_id TEXT NOT NULL, seq BIGINT NOT NULL, epoch BIGINT NOT NULL,
                 worker_id TEXT NOT NULL, written_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
        ))
        .await
        .unwrap();
}

/// The worker process: runs a pool on the schema named by `WORKER_ENV`
/// until SIGTERM / SIGINT or its stdin closes (the parent exited or closed
/// it), then exits 0 with its leases released.
pub fn worker_main() {
    let schema = std::env::var(WORKER_ENV).unwrap();
    let id = std::env::var("AEGIS_FLEET_ID").unwrap();
    let graph_kind = std::env::var("AEGIS_FLEET_GRAPH").unwrap_or_default();
    let ttl_ms: u64 = std::env::var("AEGIS_FLEET_TTL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let work_ms: u64 = std::env::var("AEGIS_FLEET_WORK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        // SIGTERM / SIGINT halt the pool gracefully; so does stdin closing.
        let stop = aegis::worker::shutdown_signal().unwrap();
        let on_eof = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            on_eof.cancel();
        });
        let inner = connect(&schema).await;
        let log = admin().await;
        let queue: Arc<dyn RunQueue> = Arc::new(Recording {
            inner,
            log,
            schema: schema.clone(),
        });
        let (name, graph) = if graph_kind == "chain" {
            ("chain", chain_graph(10, Duration::from_millis(work_ms)))
        } else {
            ("fleet", graph(Duration::from_millis(work_ms)))
        };
        let ttl = Duration::from_millis(ttl_ms);
        let pool = WorkerPool::new(queue, WarEngine::new)
            .with_config(
                WorkerConfig::default()
                    .with_worker_id(id)
                    .with_max_runs(16)
                    .with_lease_ttl(ttl)
                    .with_heartbeat_interval(ttl / 4)
                    .with_poll_interval(Duration::from_millis(200))
                    .with_shutdown_grace(Duration::from_secs(2)),
            )
            .register(name, graph)
            .unwrap();
        pool.run(stop).await.unwrap();
    });
}

/// Worker processes: every one is killed when this is dropped (also on a
/// panic), and each exits by itself if this process dies (its stdin
/// closes).
pub struct Fleet {
    pub schema: String,
    pub graph: &'static str,
    pub ttl_ms: u64,
    pub work_ms: u64,
    pub workers: Vec<(String, Child)>,
    generation: u32,
}

impl Fleet {
    pub fn new(schema: &str, graph: &'static str, ttl_ms: u64, work_ms: u64) -> Self {
        Fleet {
            schema: schema.to_string(),
            graph,
            ttl_ms,
            work_ms,
            workers: Vec::new(),
            generation: 0,
        }
    }

    pub fn spawn(&mut self) -> String {
        self.generation += 1;
        let id = format!("w{}", self.generation);
        let child = Command::new(std::env::current_exe().unwrap())
            .env(WORKER_ENV, &self.schema)
            .env("AEGIS_FLEET_ID", &id)
            .env("AEGIS_FLEET_GRAPH", self.graph)
            .env("AEGIS_FLEET_TTL_MS", self.ttl_ms.to_string())
            .env("AEGIS_FLEET_WORK_MS", self.work_ms.to_string())
            .env("RUST_LOG", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.workers.push((id.clone(), child));
        id
    }

    /// SIGKILLs worker `i` and waits for it.
    pub fn kill(&mut self, i: usize) -> String {
        let (id, mut child) = self.workers.remove(i);
        let _ = child.kill();
        let _ = child.wait();
        id
    }

    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.workers[i].1.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, child) in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Drops the schema when dropped (also on a panic).
pub struct SchemaGuard(pub String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let schema = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                admin()
                    .await
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await
                    .unwrap();
            });
        })
        .join();
    }
}
