//! Engine throughput on trivial Function nodes with the in-memory store:
//! chains of 100, 1,000 and 10,000 nodes (the per-node cost must stay flat)
//! and a 1,000-wide fan-out/join, each with and without a default retry +
//! timeout Aegis on every node (the Aegis overhead), and a 10-node chain,
//! where the fixed cost of a `start` shows; and the
//! 1,000-node chain streamed (`stream/chain_1000/{none,idle,reading}`).
//!
//! Wall-clock figures need a quiet machine. For figures that do not, the
//! same binary runs a fixed amount of work under an instruction counter:
//! `AEGIS_ENGINE_FIXED=chain` (or `fan_out`) runs the guarded 1,000-node
//! graph 10 times on a current-thread runtime and exits, e.g.
//!
//! ```text
//! cargo bench --bench engine --no-run   # prints the binary's path
//! AEGIS_ENGINE_FIXED=chain valgrind --tool=callgrind target/release/deps/engine-<hash>
//! ```
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn add_one() -> NodeSpec {
    NodeSpec::from_fn("add_one", |_, _| {
        Box::pin(async {
            let mut d = StateDelta::new();
            d.set("n", 1)?;
            Ok(d.into())
        })
    })
}

fn limits(n: u32) -> EngineLimits {
    EngineLimits::default()
        .with_max_supersteps(n + 10)
        .with_max_concurrency(2048)
}

fn schema() -> BattlefieldSchema {
    BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("n").unwrap(),
        DispatchRule::Sum,
        None,
        false,
    )])
}

fn guarded() -> Aegis {
    Aegis::new()
        .with_retry(RetryPolicy::default())
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(30)))
}

pub fn chain(n: u32, aegis: bool) -> WarGraph {
    let mut g = WarGraph::new(schema(), limits(n));
    let mut prev = START.to_string();
    for i in 0..n {
        let id = format!("n{i:05}");
        g.add_node(id.as_str(), add_one());
        g.add_edge(prev.as_str(), id.as_str());
        prev = id;
    }
    g.add_edge(prev.as_str(), END);
    if aegis {
        g.with_default_aegis(guarded());
    }
    g
}

pub fn fan_out(n: u32, aegis: bool) -> WarGraph {
    let mut g = WarGraph::new(schema(), limits(4));
    g.add_node("split", add_one()).add_edge(START, "split");
    g.add_node("join", add_one()).add_edge("join", END);
    for i in 0..n {
        let id = format!("w{i:05}");
        g.add_node(id.as_str(), add_one());
        g.add_edge("split", id.as_str())
            .add_edge(id.as_str(), "join");
    }
    if aegis {
        g.with_default_aegis(guarded());
    }
    g
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("engine");
    group.sample_size(20);
    for (name, build, size, nodes) in [
        ("chain_10", chain as fn(u32, bool) -> WarGraph, 10, 10u32),
        ("chain_100", chain, 100, 100),
        ("chain_1000", chain, 1000, 1000),
        ("chain_10000", chain, 10_000, 10_000),
        ("fan_out_1000", fan_out, 1000, 1002),
    ] {
        for aegis in [false, true] {
            let graph = build(size, aegis);
            let label = if aegis { "retry+timeout" } else { "no_aegis" };
            group.throughput(Throughput::Elements(u64::from(nodes)));
            group.bench_with_input(BenchmarkId::new(name, label), &graph, |b, g| {
                b.iter(|| {
                    rt.block_on(async {
                        let engine = WarEngine::new(InMemoryWaypointStore::new());
                        let out = engine.start(g, "bench", json!({})).await.unwrap();
                        assert!(out.is_completed());
                    })
                })
            });
        }
    }
    group.finish();
}

/// The same chain and fan-out on a two-worker multi-thread runtime, run
/// from a task as an application would, with attempts inline and isolated
/// (each Function attempt a task of its own): what the isolation costs.
fn bench_multi_thread(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("engine_mt");
    group.sample_size(20);
    for (name, graph, nodes) in [
        ("chain_1000", Arc::new(chain(1000, true)), 1000u64),
        ("fan_out_1000", Arc::new(fan_out(1000, true)), 1002),
    ] {
        for isolated in [false, true] {
            let label = if isolated { "isolated" } else { "inline" };
            group.throughput(Throughput::Elements(nodes));
            group.bench_with_input(BenchmarkId::new(name, label), &graph, |b, g| {
                b.iter(|| {
                    let g = g.clone();
                    rt.block_on(async move {
                        tokio::spawn(async move {
                            let mut engine = WarEngine::new(InMemoryWaypointStore::new());
                            if isolated {
                                engine = engine.with_isolated_attempts();
                            }
                            let out = engine.start(&g, "bench", json!({})).await.unwrap();
                            assert!(out.is_completed());
                        })
                        .await
                        .unwrap();
                    })
                })
            });
        }
    }
    group.finish();
}

/// A muster of `n` trivial tasks: one split node, `n` tasks, one join.
pub fn muster(n: u32) -> WarGraph {
    let split = NodeSpec::from_fn("split", move |_, _| {
        Box::pin(async move {
            let tasks = (0..n).map(|i| (format!("t{i}"), json!(i)));
            Ok(Directive::muster(StateDelta::new(), "worker", tasks))
        })
    });
    let mut g = WarGraph::new(schema(), limits(4));
    g.add_node("split", split)
        .add_worker_template("worker", add_one())
        .add_node("join", add_one())
        .add_edge(START, "split")
        .add_edge("worker", "join")
        .add_edge("join", END);
    g
}

fn bench_muster(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("muster");
    group.sample_size(10);
    for n in [1_000u32, 10_000, 100_000] {
        let graph = muster(n);
        group.throughput(Throughput::Elements(u64::from(n)));
        group.bench_with_input(BenchmarkId::from_parameter(n), &graph, |b, g| {
            b.iter(|| {
                rt.block_on(async {
                    let engine = WarEngine::new(InMemoryWaypointStore::new());
                    let out = engine.start(g, "bench", json!({})).await.unwrap();
                    assert!(out.is_completed());
                })
            })
        });
    }
    group.finish();
}

/// One trivial node: executing versus served from the in-memory cache.
fn bench_cache(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("cache");
    for cached in [false, true] {
        let mut g = chain(1, false);
        if cached {
            g.set_aegis(
                "n00000",
                Aegis::new().with_cache(CachePolicy::new(
                    Duration::from_secs(3600),
                    CacheKeySpec::Default,
                )),
            );
        }
        let engine =
            WarEngine::new(InMemoryWaypointStore::new()).with_node_cache(InMemoryNodeCache::new());
        let mut thread = 0u64;
        let label = if cached { "hit" } else { "execute" };
        group.bench_function(label, |b| {
            b.iter(|| {
                thread += 1;
                rt.block_on(async {
                    let out = engine
                        .start(&g, &format!("t{thread}"), json!({}))
                        .await
                        .unwrap();
                    assert!(out.is_completed());
                })
            })
        });
    }
    group.finish();
}

/// The 1,000-node chain through `start` (no stream), through `stream` with
/// a consumer that reads nothing until the outcome (events beyond the
/// queue's 1,024 are dropped and counted), and through `stream` with a
/// consumer reading every event as it comes: what a stream costs the run.
fn bench_stream(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("stream");
    group.sample_size(20);
    let graph = chain(1000, false);
    group.throughput(Throughput::Elements(1000));
    for consumer in ["none", "idle", "reading"] {
        group.bench_with_input(BenchmarkId::new("chain_1000", consumer), &graph, |b, g| {
            b.iter(|| {
                rt.block_on(async {
                    let engine = WarEngine::new(InMemoryWaypointStore::new());
                    let out = match consumer {
                        "none" => engine.start(g, "bench", json!({})).await,
                        "idle" => engine.stream(g, "bench", json!({})).outcome().await,
                        _ => {
                            let mut stream = engine.stream(g, "bench", json!({}));
                            let mut last = None;
                            while let Some(event) = stream.next().await {
                                last = Some(event);
                            }
                            match last {
                                Some(StreamEvent::Finished(out)) => out,
                                other => panic!("{other:?}"),
                            }
                        }
                    };
                    assert!(out.unwrap().is_completed());
                })
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench,
    bench_multi_thread,
    bench_muster,
    bench_cache,
    bench_stream
);
/// Ten runs of one guarded 1,000-node graph, for an instruction counter.
fn fixed_work(which: &str) {
    let graph = match which {
        "chain" => chain(1000, true),
        "fan_out" => fan_out(1000, true),
        other => panic!("AEGIS_ENGINE_FIXED is `chain` or `fan_out`, not `{other}`"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        for run in 0..10 {
            let engine = WarEngine::new(InMemoryWaypointStore::new());
            let out = engine
                .start(&graph, &format!("fixed-{run}"), json!({}))
                .await
                .unwrap();
            assert!(out.is_completed());
        }
    });
}

fn main() {
    if let Ok(which) = std::env::var("AEGIS_ENGINE_FIXED") {
        fixed_work(&which);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
