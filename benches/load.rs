//! Load: 10,000 concurrent runs (threads) of a 10-node graph on one engine
//! with the in-memory waypoint store and node cache.
//!
//! Before criterion's throughput measurement, one report pass prints what a
//! timed loop cannot: the p50/p99 latency of a single run while 10,000 are
//! in flight, and the process's peak RSS; it also checks that no run is
//! lost (each one completed with the right state, and its thread has a
//! Completed waypoint).
//!
//! ```text
//! cargo bench --bench load -- --warm-up-time 1 --measurement-time 3
//! ```
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::waypoint::WaypointStatus;
use criterion::{Criterion, Throughput};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RUNS: usize = 10_000;
const WORKERS: usize = 8;
/// Distinct inputs: runs sharing one share cache entries.
const INPUTS: usize = 500;

fn field(name: &str, rule: DispatchRule) -> FieldSpec {
    FieldSpec::new(FieldName::new(name).unwrap(), rule, None, false)
}

/// split → 8 workers → join: 10 nodes, every one under retry + timeout,
/// the workers also cached (keyed on the input).
fn graph() -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        field("x", DispatchRule::LastWrite),
        field("base", DispatchRule::LastWrite),
        field("parts", DispatchRule::Sum),
        field("result", DispatchRule::LastWrite),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default().with_max_concurrency(16));
    g.add_node(
        "split",
        NodeSpec::from_fn("split", |s, _| {
            let x = s.get("x").and_then(|v| v.as_i64()).unwrap_or(0);
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("base", x * 3)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "split");
    g.add_node(
        "join",
        NodeSpec::from_fn("join", |s, _| {
            let parts = s.get("parts").and_then(|v| v.as_i64()).unwrap_or(0);
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("result", parts)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge("join", END);
    for w in 0..WORKERS {
        let id = format!("w{w}");
        g.add_node(
            id.as_str(),
            NodeSpec::from_fn("worker", move |s, ctx| {
                let base = s.get("base").and_then(|v| v.as_i64()).unwrap_or(0);
                ctx.heartbeat();
                Box::pin(async move {
                    let mut d = StateDelta::new();
                    d.set("parts", base + w as i64)?;
                    Ok(d.into())
                })
            }),
        );
        g.add_edge("split", id.as_str())
            .add_edge(id.as_str(), "join");
        g.set_aegis(
            id.as_str(),
            Aegis::new()
                .with_retry(RetryPolicy::default())
                .with_timeout(
                    TimeoutPolicy::run(Duration::from_secs(30))
                        .with_idle_timeout(Duration::from_secs(10)),
                )
                .with_cache(CachePolicy::new(
                    Duration::from_secs(3600),
                    CacheKeySpec::Fields(vec![FieldName::new("base").unwrap()]),
                )),
        );
    }
    g.with_default_aegis(
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(30))),
    );
    g
}

fn expected(x: i64) -> i64 {
    (0..WORKERS as i64).map(|w| 3 * x + w).sum()
}

fn engine() -> Arc<WarEngine> {
    Arc::new(WarEngine::new(InMemoryWaypointStore::new()).with_node_cache(InMemoryNodeCache::new()))
}

/// Starts `RUNS` runs at once; returns each run's latency from submission
/// (queueing included) and from its first poll, checking its state.
async fn load(
    engine: Arc<WarEngine>,
    graph: Arc<WarGraph>,
    round: usize,
) -> Vec<(Duration, Duration)> {
    let tasks: Vec<_> = (0..RUNS)
        .map(|i| {
            let (engine, graph) = (engine.clone(), graph.clone());
            let submitted = Instant::now();
            tokio::spawn(async move {
                let x = (i % INPUTS) as i64;
                let t0 = Instant::now();
                let state = engine
                    .start(&graph, &format!("r{round}-{i}"), json!({ "x": x }))
                    .await
                    .unwrap()
                    .into_result()
                    .unwrap();
                let took = (submitted.elapsed(), t0.elapsed());
                assert_eq!(state.get("result"), Some(&json!(expected(x))));
                took
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(RUNS);
    for t in tasks {
        latencies.push(t.await.expect("a run task"));
    }
    latencies
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn report() {
    let rt = runtime();
    let graph = Arc::new(graph());
    let engine = engine();
    let t0 = Instant::now();
    let both = rt.block_on(load(engine.clone(), graph, 0));
    let wall = t0.elapsed();
    // No run lost: every thread ended in a Completed waypoint.
    let completed = rt.block_on(async {
        let mut n = 0;
        for i in 0..RUNS {
            let w = engine.store().latest(&format!("r0-{i}")).await.unwrap();
            if w.is_some_and(|w| w.status == WaypointStatus::Completed) {
                n += 1;
            }
        }
        n
    });
    assert_eq!(completed, RUNS, "runs lost");
    let pct = |mut v: Vec<Duration>, p: f64| {
        v.sort_unstable();
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
    };
    let queued: Vec<Duration> = both.iter().map(|b| b.0).collect();
    let service: Vec<Duration> = both.iter().map(|b| b.1).collect();
    println!(
        "load: {RUNS} concurrent runs of a 10-node graph in {wall:?}: {:.0} runs/s; latency from submission p50 {:?} p99 {:?}; from first poll p50 {:?} p99 {:?}; peak RSS {} MiB; completed {completed}/{RUNS}",
        RUNS as f64 / wall.as_secs_f64(),
        pct(queued.clone(), 0.50),
        pct(queued, 0.99),
        pct(service.clone(), 0.50),
        pct(service, 0.99),
        peak_rss_kib().map_or(0, |k| k / 1024),
    );
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let graph = Arc::new(graph());
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    group.throughput(Throughput::Elements(RUNS as u64));
    let mut round = 1;
    group.bench_function("10k_concurrent_runs_10_nodes", |b| {
        b.iter(|| {
            // A fresh engine per batch: the store would otherwise grow
            // across criterion's iterations.
            round += 1;
            rt.block_on(load(engine(), graph.clone(), round))
        })
    });
    group.finish();
}

fn main() {
    report();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
