//! What metrics and traces add per attempt (features `metrics` and
//! `otel`): a 1,000-node chain of trivial Function nodes, each one attempt
//! under a retry + timeout Aegis, run with
//!
//! - `off`: nothing installed (what every build pays: the counting points'
//!   atomic load, the spans' disabled callsites);
//! - `metrics`: `Metrics::install()` (every attempt counted, its trace
//!   events built for the observer);
//! - `metrics+otel`: also an `Otel` layer on the thread's subscriber, its
//!   collector gone (connection refused), so every span is built, queued or
//!   dropped: the worst case for a run, which never waits on the export.
//!
//! Divide a figure's difference from `off` by 1,000 for the added cost per
//! attempt. `AEGIS_OBSERVABILITY_FIXED=off|metrics|otel` runs 10 chains in
//! that mode and exits, for an instruction count under callgrind.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::{EngineLimits, NodeSpec};
use aegis::metrics::Metrics;
use aegis::prelude::*;
use aegis::trace::otel::{Otel, OtelConfig};
use criterion::{BenchmarkId, Criterion, Throughput};
use serde_json::json;
use std::time::Duration;
use tracing_subscriber::prelude::*;

const NODES: u32 = 1000;

fn chain() -> WarGraph {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("n").unwrap(),
        DispatchRule::Sum,
        None,
        false,
    )]);
    let limits = EngineLimits::default().with_max_supersteps(NODES + 10);
    let mut g = WarGraph::new(schema, limits);
    let mut prev = START.to_string();
    for i in 0..NODES {
        let id = format!("n{i:05}");
        g.add_node(
            id.as_str(),
            NodeSpec::from_fn("add_one", |_, _| {
                Box::pin(async {
                    let mut d = StateDelta::new();
                    d.set("n", 1)?;
                    Ok(d.into())
                })
            }),
        );
        g.add_edge(prev.as_str(), id.as_str());
        prev = id;
    }
    g.add_edge(prev.as_str(), END);
    g.with_default_aegis(
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(30))),
    );
    g
}

/// An exporter whose collector is gone: nothing listens on port 9 here.
fn otel() -> Otel {
    Otel::new(OtelConfig::new("http://127.0.0.1:9").with_export_timeout(Duration::from_millis(200)))
        .unwrap()
}

fn run(rt: &tokio::runtime::Runtime, g: &WarGraph) {
    rt.block_on(async {
        let engine = WarEngine::new(InMemoryWaypointStore::new());
        let out = engine.start(g, "bench", json!({})).await.unwrap();
        assert!(out.is_completed());
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let g = chain();
    if let Ok(mode) = std::env::var("AEGIS_OBSERVABILITY_FIXED") {
        let otel = otel();
        let _guard = match mode.as_str() {
            "off" => None,
            "metrics" => {
                Metrics::install();
                None
            }
            "otel" => {
                Metrics::install();
                Some(
                    tracing_subscriber::registry()
                        .with(otel.layer())
                        .set_default(),
                )
            }
            other => panic!("AEGIS_OBSERVABILITY_FIXED is off, metrics or otel, not `{other}`"),
        };
        for _ in 0..10 {
            run(&rt, &g);
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("observability");
    group.sample_size(20);
    group.throughput(Throughput::Elements(u64::from(NODES)));
    group.bench_function(BenchmarkId::new("chain_1000", "off"), |b| {
        b.iter(|| run(&rt, &g))
    });
    Metrics::install();
    group.bench_function(BenchmarkId::new("chain_1000", "metrics"), |b| {
        b.iter(|| run(&rt, &g))
    });
    let otel = otel();
    {
        let _guard = tracing_subscriber::registry()
            .with(otel.layer())
            .set_default();
        group.bench_function(BenchmarkId::new("chain_1000", "metrics+otel"), |b| {
            b.iter(|| run(&rt, &g))
        });
    }
    group.finish();
    println!("spans dropped (collector gone): {}", otel.dropped_spans());
    c.final_summary();
}
