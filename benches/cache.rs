//! Node cache costs: key derivation, an in-memory hit, and (with the
//! `redis-cache` feature) a Redis round trip for a hit on loopback.
//!
//! `cargo bench --bench cache --features redis-cache -- --warm-up-time 1 --measurement-time 3`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use ::aegis::*;
use aegis::cache::InMemoryNodeCache;
use aegis::cache::NodeCache;
#[cfg(feature = "redis-cache")]
use aegis::cache::RedisNodeCache;
use aegis::error::StateNodeError;
use aegis::graph::Directive;
use aegis::graph::InputMapping;
use aegis::graph::NodeContext;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::id::NodeId;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::state::Battlefield;
use aegis::state::BattlefieldSchema;
use aegis::state::DispatchRule;
use aegis::state::FieldName;
use aegis::state::FieldSpec;
use aegis::state::StateDelta;
use aegis_runtime::__internal::NodeCacheHandle;
use aegis_runtime::__internal::StoreOutcome;
use aegis_runtime::__internal::derive_key;
use aegis_runtime::__internal::initial_state;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

struct Noop;

#[async_trait]
impl StateNode for Noop {
    fn kind_name(&self) -> &str {
        "noop"
    }

    async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        Ok(StateDelta::new().into())
    }
}

fn field(name: &str) -> FieldName {
    FieldName::new(name).unwrap()
}

fn schema() -> BattlefieldSchema {
    BattlefieldSchema::new(vec![
        FieldSpec::new(field("question"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(field("answer"), DispatchRule::LastWrite, None, false),
    ])
}

fn state() -> Battlefield {
    initial_state(
        &schema(),
        &json!({"question": "What is the airspeed velocity of an unladen swallow?"}),
    )
    .unwrap()
}

/// A typical small result: one answer of a few hundred bytes.
fn directive() -> Directive {
    let mut delta = StateDelta::new();
    delta.set("answer", "x".repeat(300)).unwrap();
    Directive::edges(delta)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn key_derivation(c: &mut Criterion) {
    let paladin = NodeSpec::paladin(
        Paladin::new("Answerer").with_model("gpt-4o"),
        InputMapping::new("Answer: {question}"),
        field("answer"),
    );
    let function = NodeSpec::function(Noop);
    let node = NodeId::new("answerer");
    let st = state();
    let fields = CacheKeySpec::Fields(vec![field("question")]);
    c.bench_function("node_cache/derive_key/paladin_fields", |b| {
        b.iter(|| derive_key("v6:bench", &node, &paladin, &fields, black_box(&st), None).unwrap())
    });
    c.bench_function("node_cache/derive_key/function_snapshot", |b| {
        b.iter(|| {
            derive_key(
                "v6:bench",
                &node,
                &function,
                &CacheKeySpec::Default,
                black_box(&st),
                None,
            )
            .unwrap()
        })
    });
}

/// Stores one entry through a handle, then measures the hit path.
fn hit_benches(
    c: &mut Criterion,
    name: &str,
    rt: &tokio::runtime::Runtime,
    backend: Arc<dyn NodeCache>,
) {
    let handle = NodeCacheHandle::new(backend.clone());
    let schema = schema();
    let key = derive_key(
        "v6:bench",
        &NodeId::new("answerer"),
        &NodeSpec::function(Noop),
        &CacheKeySpec::Default,
        &state(),
        None,
    )
    .unwrap();
    let stored = rt.block_on(handle.store(&schema, &key, &directive(), Duration::from_secs(3600)));
    assert!(matches!(stored, StoreOutcome::Stored { .. }), "{stored:?}");

    c.bench_function(&format!("node_cache/{name}/get_hit"), |b| {
        b.iter(|| {
            let hit = rt.block_on(backend.get(black_box(&key))).unwrap();
            assert!(hit.is_some());
            hit
        })
    });
    c.bench_function(&format!("node_cache/{name}/handle_lookup_hit"), |b| {
        b.iter(|| {
            let hit = rt.block_on(handle.lookup(&schema, black_box(&key)));
            assert!(hit.is_hit());
            hit
        })
    });
    rt.block_on(backend.invalidate_all()).unwrap();
}

fn in_memory(c: &mut Criterion) {
    let rt = runtime();
    hit_benches(c, "memory", &rt, Arc::new(InMemoryNodeCache::new()));
}

#[cfg(feature = "redis-cache")]
fn redis(c: &mut Criterion) {
    let rt = runtime();
    let prefix = format!("aegis-bench:{}", std::process::id());
    let cache = rt
        .block_on(RedisNodeCache::connect("redis://127.0.0.1:6379", prefix))
        .unwrap_or_else(|e| panic!("the Redis bench needs Redis at 127.0.0.1:6379: {e}"));
    hit_benches(c, "redis", &rt, Arc::new(cache));
}

#[cfg(not(feature = "redis-cache"))]
fn redis(_: &mut Criterion) {
    eprintln!("node_cache/redis: skipped, run with --features redis-cache");
}

criterion_group!(benches, key_derivation, in_memory, redis);
criterion_main!(benches);
