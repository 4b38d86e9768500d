//! Cache provenance: every entry records who produced it (node, attempt,
//! and for a Paladin the serving provider, its model and chain position),
//! a hit reports it on its record and its `NodeFinished` event, both
//! backends carry it, and entries without it still read. A fallback
//! provider's answer is not cached under the node's key unless
//! `CachePolicy::cache_fallback_results` says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::cache::CacheEntry;
use aegis::cache::NodeCache;
#[cfg(feature = "redis-cache")]
use aegis::cache::RedisNodeCache;
use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmPort;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::trace::CacheOrigin;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::NodeExecutionRecord;
use aegis_runtime::__internal::NodeCacheHandle;
use aegis_runtime::__internal::derive_key;
use aegis_runtime::__internal::initial_state;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

fn mock(name: &str) -> MockLlmAdapter {
    MockLlmAdapter::new().with_provider_name(name)
}

fn overloaded(provider: &str) -> LlmError {
    LlmError::ProviderError {
        provider: provider.into(),
        status: 503,
        message: "overloaded".into(),
        retry_after: None,
    }
}

/// `START -> answer -> END`: a cached Paladin over the chain `mocks`,
/// retried once at once.
fn cached_paladin(
    mocks: &[&MockLlmAdapter],
    cache: Arc<dyn NodeCache>,
    policy: CachePolicy,
) -> (
    WarEngine<InMemoryWaypointStore>,
    WarGraph,
    Arc<CollectingTraceSink>,
) {
    let chain = FallbackLlmAdapter::new(
        mocks
            .iter()
            .map(|m| Arc::new((*m).clone()) as Arc<dyn LlmPort>)
            .collect(),
    )
    .unwrap();
    let port = Arc::new(PaladinExecutionService::new(chain));
    let g = one_paladin(
        Aegis::new()
            .with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_interval(Duration::ZERO)
                    .with_jitter(false),
            )
            .with_cache(policy),
    );
    let sink = CollectingTraceSink::new();
    let e = WarEngine::new(InMemoryWaypointStore::new())
        .with_paladin_port(port)
        .with_node_cache(cache)
        .with_trace_sink(sink.clone());
    (e, g, sink)
}

fn policy() -> CachePolicy {
    CachePolicy::new(Duration::from_secs(60), CacheKeySpec::Default)
}

fn origin(thread: &str, attempt: u32, provider: &str, position: u32) -> CacheOrigin {
    CacheOrigin::new(NodeId::new("answer"), attempt)
        .with_thread_id(Some(thread))
        .with_served_by(Some(provider))
        .with_model(Some("gpt-4o"))
        .with_chain_position(position)
        .with_fallback(position > 0)
}

/// The `cache_origin` of every cache-hit `NodeFinished` event.
fn hit_origins(sink: &CollectingTraceSink) -> Vec<Option<CacheOrigin>> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::NodeFinished {
                cache_hit: true,
                cache_origin,
                ..
            } => Some(cache_origin.map(|o| *o)),
            _ => None,
        })
        .collect()
}

/// Attempt 1 fails on both providers; attempt 2 is served by the primary.
/// A hit in another thread reports exactly that.
async fn a_hit_reports_who_produced_it(cache: Arc<dyn NodeCache>) {
    let primary = mock("openai")
        .with_error(overloaded("openai"))
        .with_response("hello");
    let backup = mock("ollama").with_error(overloaded("ollama"));
    let (e, g, sink) = cached_paladin(&[&primary, &backup], cache, policy());

    run_to_state(&e, &g, "t1", json!({})).await;
    let first = records(&e, "t1").await;
    assert_eq!((first[0].attempt, first[0].cache_hit), (2, false));
    assert_eq!(first[0].cache_origin, None, "only a hit reports an origin");

    let state = run_to_state(&e, &g, "t2", json!({})).await;
    assert_eq!(state.get("answer"), Some(&json!("hello")));
    assert_eq!(primary.call_count(), 2, "the hit called no provider");
    let hit = &records(&e, "t2").await[0];
    let expected = origin("t1", 2, "openai", 0);
    assert!(hit.cache_hit);
    assert_eq!(hit.cache_origin.as_deref(), Some(&expected));
    assert_eq!(hit_origins(&sink), vec![Some(expected.clone())]);

    let line = sink
        .events()
        .iter()
        .map(ToString::to_string)
        .find(|l| l.contains("served from the cache"))
        .unwrap();
    assert!(
        line.ends_with(
            "(stored by attempt 2 of answer, served by openai (position 0), model gpt-4o)"
        ),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn in_memory_a_hit_reports_who_produced_it() {
    a_hit_reports_who_produced_it(Arc::new(InMemoryNodeCache::new())).await;
}

#[cfg(feature = "redis-cache")]
async fn redis(test: &str) -> Arc<dyn NodeCache> {
    let prefix = format!("aegis-test-provenance-{test}-{}", std::process::id());
    let redis = RedisNodeCache::connect("redis://127.0.0.1:6379", &prefix)
        .await
        .expect("Redis must be running on 127.0.0.1:6379 for the redis-cache tests");
    let cache: Arc<dyn NodeCache> = Arc::new(redis);
    cache.invalidate_all().await.unwrap();
    cache
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn in_redis_a_hit_reports_who_produced_it() {
    let cache = redis("hit").await;
    a_hit_reports_who_produced_it(cache.clone()).await;
    cache.invalidate_all().await.unwrap();
}

/// An entry stored without an origin (as every entry was before entries
/// recorded one) is still a hit, reporting no origin.
async fn an_entry_without_an_origin_still_reads(cache: Arc<dyn NodeCache>) {
    let primary = mock("openai").with_response("hello");
    let (e, g, sink) = cached_paladin(&[&primary], cache.clone(), policy());
    run_to_state(&e, &g, "t1", json!({})).await;
    // Rewrite the entry as an older build stored it: the same bytes minus
    // `origin`.
    let handle = NodeCacheHandle::new(cache.clone());
    let key = derive_key(
        &g.fingerprint(),
        &NodeId::new("answer"),
        g.node("answer").unwrap(),
        &CacheKeySpec::Default,
        &initial_state(g.schema(), &json!({})).unwrap(),
        None,
    )
    .unwrap();
    let stored = cache.get(&key).await.unwrap().unwrap();
    assert!(stored.origin.is_some());
    let old = CacheEntry::new(key.clone(), stored.delta.clone(), stored.expires_at);
    assert!(
        !String::from_utf8(old.to_bytes().unwrap())
            .unwrap()
            .contains("origin")
    );
    cache.put(&key, &old).await.unwrap();
    assert!(handle.lookup(g.schema(), &key).await.is_hit());

    run_to_state(&e, &g, "t2", json!({})).await;
    let hit = &records(&e, "t2").await[0];
    assert!(hit.cache_hit);
    assert_eq!(hit.cache_origin, None);
    assert_eq!(hit_origins(&sink), vec![None]);
    assert_eq!(primary.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn in_memory_an_entry_without_an_origin_still_reads() {
    an_entry_without_an_origin_still_reads(Arc::new(InMemoryNodeCache::new())).await;
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn in_redis_an_entry_without_an_origin_still_reads() {
    let cache = redis("old").await;
    an_entry_without_an_origin_still_reads(cache.clone()).await;
    cache.invalidate_all().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_fallback_providers_answer_is_not_cached_by_default() {
    let primary = mock("openai")
        .with_error(overloaded("openai"))
        .with_default_response("primary");
    let backup = mock("ollama").with_default_response("backup");
    let (e, g, sink) = cached_paladin(
        &[&primary, &backup],
        Arc::new(InMemoryNodeCache::new()),
        policy(),
    );
    let first = run_to_state(&e, &g, "t1", json!({})).await;
    assert_eq!(
        first.get("answer"),
        Some(&json!("backup")),
        "still the run's result"
    );
    // Not stored: the next run asks again, and the recovered primary's
    // answer is the one cached.
    let second = run_to_state(&e, &g, "t2", json!({})).await;
    assert_eq!(second.get("answer"), Some(&json!("primary")));
    assert!(!records(&e, "t2").await[0].cache_hit);
    let third = run_to_state(&e, &g, "t3", json!({})).await;
    assert_eq!(third.get("answer"), Some(&json!("primary")));
    assert_eq!((primary.call_count(), backup.call_count()), (2, 1));
    assert_eq!(hit_origins(&sink), vec![Some(origin("t2", 1, "openai", 0))]);
}

#[tokio::test(start_paused = true)]
async fn cache_fallback_results_caches_a_fallback_answer_and_says_so() {
    let primary = mock("openai")
        .with_error(overloaded("openai"))
        .with_default_response("primary");
    let backup = mock("ollama").with_default_response("backup");
    let (e, g, sink) = cached_paladin(
        &[&primary, &backup],
        Arc::new(InMemoryNodeCache::new()),
        policy().with_cache_fallback_results(true),
    );
    run_to_state(&e, &g, "t1", json!({})).await;
    let second = run_to_state(&e, &g, "t2", json!({})).await;
    assert_eq!(
        second.get("answer"),
        Some(&json!("backup")),
        "served from the cache"
    );
    assert_eq!((primary.call_count(), backup.call_count()), (1, 1));
    let hit = &records(&e, "t2").await[0];
    let expected = origin("t1", 1, "ollama", 1);
    assert!(expected.fallback);
    assert_eq!(hit.cache_origin.as_deref(), Some(&expected));
    assert_eq!(hit_origins(&sink), vec![Some(expected)]);
}

#[test]
fn a_record_written_before_cache_origin_existed_still_decodes() {
    let old = json!({
        "node_id": "answer",
        "task_key": null,
        "status": "Succeeded",
        "attempt": 1,
        "attempts": [],
        "cache_hit": true,
        "started_at": {"secs_since_epoch": 1, "nanos_since_epoch": 0},
        "duration_ms": 0
    });
    let record: NodeExecutionRecord = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(record.cache_origin, None);
    // And one without an origin is written exactly as before.
    assert_eq!(serde_json::to_value(&record).unwrap(), old);
}

#[test]
fn the_fallback_choice_is_part_of_the_fingerprint_only_when_on() {
    let graph = |policy: CachePolicy| {
        let mut g = WarGraph::new(schema(&[("answer", LastWrite)]), EngineLimits::default());
        g.add_node("answer", write("answer", json!(1)))
            .add_edge(START, "answer")
            .add_edge("answer", END)
            .set_aegis("answer", Aegis::new().with_cache(policy));
        g.fingerprint()
    };
    let off = graph(policy());
    let on = graph(policy().with_cache_fallback_results(true));
    assert_ne!(off, on);
    // Off is the policy as it was before the field existed.
    let serialized = serde_json::to_value(policy()).unwrap();
    assert_eq!(serialized.as_object().unwrap().len(), 2, "{serialized}");
}
