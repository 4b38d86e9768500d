//! Waypoint write latency per superstep for each store, and a 1,000-superstep
//! run end to end on SQLite.
//!
//! ```text
//! cargo bench --bench waypoints -- --warm-up-time 1 --measurement-time 3
//! cargo bench --bench waypoints --features postgres -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! PostgreSQL runs against `AEGIS_BENCH_POSTGRES_URL` (default: the local
//! test server), in a schema of its own that is dropped afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::prelude::*;
use aegis::waypoint::{
    Activation, InMemoryWaypointStore, SqliteOptions, SqliteSynchronous, SqliteWaypointStore,
    Waypoint, WaypointStatus, WaypointStore,
};
use aegis_runtime::__internal::{Writer, initial_state, merge};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn schema() -> BattlefieldSchema {
    let f = |n: &str, d| FieldSpec::new(FieldName::new(n).unwrap(), d, None, false);
    BattlefieldSchema::new(vec![
        f("payload", DispatchRule::LastWrite),
        f("step", DispatchRule::LastWrite),
        f("log", DispatchRule::Append),
    ])
}

fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A file path under the system temp dir, with its WAL files removed on drop.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> Self {
        TempDb(std::env::temp_dir().join(format!("{}.sqlite", unique("aegis-bench"))))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = self.0.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Successive supersteps of one thread whose state carries `size` bytes of
/// payload: each superstep sets a small counter (`delta`), or replaces the
/// whole payload too (`rewrite`). The state stays the same size however
/// many iterations criterion runs; the growing-list case is `engine_run`.
struct Thread {
    id: String,
    seq: u64,
    state: Battlefield,
    size: usize,
    rewrite: bool,
}

impl Thread {
    fn new(size: usize, rewrite: bool) -> Self {
        let payload = "p".repeat(size);
        Thread {
            id: unique("thread"),
            seq: 0,
            state: initial_state(&schema(), &json!({"payload": payload})).unwrap(),
            size,
            rewrite,
        }
    }

    fn next(&mut self) -> Waypoint {
        if self.seq > 0 {
            let mut delta = StateDelta::new();
            delta.set("step", self.seq).unwrap();
            if self.rewrite {
                let c = char::from(b'a' + (self.seq % 26) as u8);
                delta
                    .set("payload", c.to_string().repeat(self.size))
                    .unwrap();
            }
            self.state = merge(&schema(), &self.state, [(Writer::node("n"), &delta)]).unwrap();
        }
        let mut w = Waypoint::new(
            self.id.clone(),
            self.seq,
            WaypointStatus::Running,
            self.state.clone(),
        )
        .with_visits([(NodeId::new("n"), self.seq as u32)]);
        w.superstep = self.seq as u32;
        w.vanguard = vec![Activation::node("n")].into();
        w.fingerprint = "bench".into();
        self.seq += 1;
        w
    }
}

/// Mean time to `put` one superstep's waypoint.
fn bench_puts<S: WaypointStore>(
    c: &mut Criterion,
    rt: &Runtime,
    group_name: &str,
    store_name: &str,
    store: &Arc<S>,
) {
    let mut group = c.benchmark_group(group_name);
    group.sample_size(10);
    for (label, size) in [("1KB", 1024), ("1MB", 1024 * 1024)] {
        let mut thread = Thread::new(size, group_name.ends_with("rewrite"));
        group.bench_function(BenchmarkId::new(store_name, label), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let w = thread.next();
                        let start = Instant::now();
                        store.put(w).await.unwrap();
                        spent += start.elapsed();
                    }
                    spent
                })
            });
        });
    }
    group.finish();
}

fn puts(c: &mut Criterion) {
    let rt = runtime();
    for group in ["waypoint_put/delta", "waypoint_put/rewrite"] {
        let memory = Arc::new(InMemoryWaypointStore::new());
        bench_puts(c, &rt, group, "memory", &memory);

        for (name, sync) in [
            ("sqlite", SqliteSynchronous::Full),
            ("sqlite_sync_normal", SqliteSynchronous::Normal),
        ] {
            let db = TempDb::new();
            let options = SqliteOptions::default().with_synchronous(sync);
            let sqlite = Arc::new(
                rt.block_on(SqliteWaypointStore::open_with(&db.0, options))
                    .unwrap(),
            );
            bench_puts(c, &rt, group, name, &sqlite);
        }

        #[cfg(feature = "postgres")]
        postgres::bench(c, &rt, group);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    fn url() -> String {
        std::env::var("AEGIS_BENCH_POSTGRES_URL")
            .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
    }

    pub(super) fn bench(c: &mut Criterion, rt: &Runtime, group: &str) {
        let schema = unique("aegis_bench");
        let options = aegis::waypoint::PostgresOptions::default().with_schema(&schema);
        let store = match rt.block_on(aegis::waypoint::PostgresWaypointStore::connect_with(
            &url(),
            options,
        )) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                eprintln!("skipping the PostgreSQL benchmarks: {e}");
                return;
            }
        };
        bench_puts(c, rt, group, "postgres", &store);
        drop(store);
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
                .await
                .unwrap();
            let driver = tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await
                .unwrap();
            drop(client);
            let _ = driver.await;
        });
    }
}

/// Appends its superstep to `log` and loops until superstep 1,000.
struct Append;

const SUPERSTEPS: u32 = 1_000;

#[async_trait]
impl StateNode for Append {
    fn kind_name(&self) -> &str {
        "append"
    }

    async fn run(
        &self,
        _state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        let mut delta = StateDelta::new();
        delta.set("log", json!({"step": ctx.superstep()}))?;
        Ok(if ctx.superstep() >= SUPERSTEPS {
            Directive::end(delta)
        } else {
            delta.into()
        })
    }
}

fn append_graph() -> WarGraph {
    let mut graph = WarGraph::new(
        schema(),
        EngineLimits::default()
            .with_max_supersteps(SUPERSTEPS + 1)
            .with_max_node_visits(SUPERSTEPS + 1),
    );
    graph.add_node("append", NodeSpec::function(Append));
    graph.add_edge(START, "append").add_edge("append", "append");
    graph
}

fn run_1000(c: &mut Criterion) {
    let rt = runtime();
    let graph = append_graph();
    let mut group = c.benchmark_group("engine_run");
    group.sample_size(10);
    // The engine alone, for comparison.
    let memory = WarEngine::new(InMemoryWaypointStore::new());
    group.bench_function("memory/1000_supersteps_append", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let outcome = memory
                        .start(&graph, &unique("run"), json!({}))
                        .await
                        .unwrap();
                    assert!(outcome.is_completed());
                }
                start.elapsed()
            })
        });
    });
    let mut kept = None;
    for (name, sync) in [
        ("sqlite", SqliteSynchronous::Full),
        ("sqlite_sync_normal", SqliteSynchronous::Normal),
    ] {
        let db = TempDb::new();
        let options = SqliteOptions::default().with_synchronous(sync);
        let store = Arc::new(
            rt.block_on(SqliteWaypointStore::open_with(&db.0, options))
                .unwrap(),
        );
        let engine = WarEngine::new(store.clone());
        group.bench_function(format!("{name}/1000_supersteps_append"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let outcome = engine
                            .start(&graph, &unique("run"), json!({}))
                            .await
                            .unwrap();
                        assert!(outcome.is_completed());
                    }
                    start.elapsed()
                })
            });
        });
        kept = Some((db, store, engine));
    }
    group.finish();
    let Some((_db, store, engine)) = kept else {
        return;
    };

    // What those runs stored, row by row.
    rt.block_on(async {
        let thread = unique("sized");
        engine.start(&graph, &thread, json!({})).await.unwrap();
        let rows = store.row_stats(&thread).await.unwrap();
        let (snapshots, deltas): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.snapshot);
        let sum = |rows: &[&aegis::waypoint::WaypointRowStats]| -> u64 {
            rows.iter().map(|r| r.payload_bytes).sum()
        };
        let total = sum(&snapshots) + sum(&deltas);
        let last = store.latest(&thread).await.unwrap().unwrap();
        let whole = serde_json::to_vec(&last).unwrap().len();
        println!(
            "rows of one 1,000-superstep run (one small item appended per superstep): \
             {} rows, {total} bytes in all ({} bytes per row on average); \
             {} delta rows of {}..{} bytes (mean {}); {} snapshot rows (mean {} bytes, largest {}); \
             the final waypoint in full is {whole} bytes",
            rows.len(),
            total / rows.len() as u64,
            deltas.len(),
            deltas.iter().map(|r| r.payload_bytes).min().unwrap_or(0),
            deltas.iter().map(|r| r.payload_bytes).max().unwrap_or(0),
            sum(&deltas) / deltas.len().max(1) as u64,
            snapshots.len(),
            sum(&snapshots) / snapshots.len().max(1) as u64,
            snapshots.iter().map(|r| r.payload_bytes).max().unwrap_or(0),
        );
    });
}

criterion_group!(benches, puts, run_1000);
criterion_main!(benches);
