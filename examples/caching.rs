//! Node caching: the guide's `answerer` node keyed on `question`. The
//! second run is served from the cache (no provider call); changing the
//! prompt changes the key, so the third run misses.
//!
//! Uses the in-memory cache, or Redis when `REDIS_URL` is set (build with
//! `--features redis-cache`). Run it with `cargo run --example caching`.

use aegis::cache::NodeCache;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::state::CacheMarker;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn answerer_graph(template: &str) -> Result<WarGraph, Box<dyn std::error::Error>> {
    let question = FieldName::new("question")?;
    let answer = FieldName::new("answer")?;
    let audit_log = FieldName::new("audit_log")?;
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(question.clone(), DispatchRule::LastWrite, None, false),
        FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
        // An Append log must never be replayed from a cached delta.
        FieldSpec::new(audit_log, DispatchRule::Append, None, false).with_cache(CacheMarker::Deny),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node(
            "answerer",
            NodeSpec::paladin(
                Paladin::new("Answerer").with_model("gpt-4o-mini"),
                InputMapping::new(template),
                answer,
            ),
        )
        .add_edge(START, "answerer")
        .add_edge("answerer", END)
        .set_aegis(
            "answerer",
            Aegis::new().with_cache(CachePolicy::new(
                Duration::from_secs(15 * 60),
                CacheKeySpec::Fields(vec![question]),
            )),
        );
    Ok(graph)
}

async fn backend() -> Result<Arc<dyn NodeCache>, Box<dyn std::error::Error>> {
    #[cfg(feature = "redis-cache")]
    if let Ok(url) = std::env::var("REDIS_URL") {
        println!("cache: Redis at {url}");
        let cache = aegis::cache::RedisNodeCache::connect(&url, "aegis-example-caching").await?;
        cache.invalidate_all().await?;
        return Ok(Arc::new(cache));
    }
    println!("cache: in memory (set REDIS_URL and build with --features redis-cache for Redis)");
    Ok(Arc::new(InMemoryNodeCache::new()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = Arc::new(MockLlmAdapter::new().with_provider_name("mock"));
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone())
        .with_llm(provider.clone())
        .with_node_cache(backend().await?);

    let question = json!({ "question": "Why is the sky blue?" });
    let original = answerer_graph("Answer: {question}")?;
    let reworded = answerer_graph("Answer in one sentence: {question}")?;
    for (thread, graph, what) in [
        ("first", &original, "first run"),
        ("second", &original, "same question, same prompt"),
        ("third", &reworded, "same question, new prompt"),
    ] {
        let state = engine
            .start(graph, thread, question.clone())
            .await?
            .into_result()?;
        let record = store
            .history(thread)
            .await?
            .into_iter()
            .flat_map(|w| w.records)
            .find(|r| r.node_id.as_str() == "answerer");
        println!(
            "{what:<28} cache_hit: {:<5} provider calls so far: {}  answer: {}",
            record.is_some_and(|r| r.cache_hit),
            provider.call_count(),
            state.get("answer").cloned().unwrap_or_default()
        );
    }
    Ok(())
}
