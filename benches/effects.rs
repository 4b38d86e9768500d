//! What an effect costs: a one-node run with and without an effect (an
//! instant call) on the in-memory and SQLite stores. The effect adds one
//! ledger write before the call and one after it; a node without an effect
//! pays nothing.
//!
//! ```text
//! cargo bench --bench effects -- --warm-up-time 1 --measurement-time 3
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use aegis::graph::{EngineLimits, NodeSpec};
use aegis::prelude::*;
use aegis::waypoint::SqliteWaypointStore;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One node `pay`, setting `receipt`; through an effect when `effect`.
fn graph(effect: bool) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("receipt").unwrap(),
        DispatchRule::LastWrite,
        None,
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "pay",
        NodeSpec::from_fn("pay", move |_, ctx| {
            Box::pin(async move {
                let receipt: Value = if effect {
                    ctx.effect("charge")
                        .run(
                            |key| async move { Ok::<_, String>(json!({ "charge": key.as_str() })) },
                        )
                        .await?
                } else {
                    json!({ "charge": "ch" })
                };
                let mut d = StateDelta::new();
                d.set("receipt", receipt)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "pay")
    .add_edge("pay", END);
    g
}

fn next_thread() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn bench<S: WaypointStore>(c: &mut Criterion, rt: &Runtime, store: &str, engine: &WarEngine<S>) {
    let mut group = c.benchmark_group(format!("effects/{store}"));
    for (name, effect) in [("without_effect", false), ("with_effect", true)] {
        let g = graph(effect);
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let outcome = engine.start(&g, &next_thread(), json!({})).await.unwrap();
                    assert!(matches!(outcome, RunOutcome::Completed { .. }));
                })
            })
        });
    }
    group.finish();
}

fn effects(c: &mut Criterion) {
    let rt = runtime();
    bench(
        c,
        &rt,
        "in_memory",
        &WarEngine::new(InMemoryWaypointStore::new()),
    );
    let path: PathBuf =
        std::env::temp_dir().join(format!("aegis-bench-effects-{}.sqlite", std::process::id()));
    let store = rt.block_on(SqliteWaypointStore::open(&path)).unwrap();
    bench(c, &rt, "sqlite", &WarEngine::new(store));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

criterion_group!(benches, effects);
criterion_main!(benches);
