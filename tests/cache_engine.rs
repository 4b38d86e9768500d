//! Node caching through the engine: hits execute nothing, misses store only
//! Edges-routed successes, the TTL is a closed boundary, keys follow the
//! input, the prompt, the model and the graph.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::cache::CacheClock;
use aegis::cache::CacheEntry;
use aegis::cache::CacheKey;
use aegis::cache::NodeCache;
use aegis::cache::NodeCacheError;
#[cfg(feature = "redis-cache")]
use aegis::cache::RedisNodeCache;
use aegis::engine::InterceptorDecision;
use aegis::engine::NodeInterceptor;
use aegis::error::PaladinError;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinPort;
use aegis::paladin::PaladinResult;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::state::CacheMarker;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::NodeStatus;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::fixtures::*;

fn cached(ttl: Duration, key: CacheKeySpec) -> Aegis {
    Aegis::new().with_cache(CachePolicy::new(ttl, key))
}

/// `START -> answer -> END`, the node counting its executions.
fn answer_graph(runs: Arc<AtomicU32>, key: CacheKeySpec) -> WarGraph {
    let node = NodeSpec::from_fn("answer", move |state, _| {
        runs.fetch_add(1, Ordering::SeqCst);
        let q = state.get("question").cloned().unwrap_or_default();
        Box::pin(async move { Ok(delta(&[("answer", json!(format!("answer to {q}")))]).into()) })
    });
    let mut g = chain(
        schema(&[
            ("question", LastWrite),
            ("locale", LastWrite),
            ("answer", LastWrite),
        ]),
        vec![("answerer", node)],
    );
    g.set_aegis("answerer", cached(Duration::from_secs(60), key));
    g
}

struct CountingInterceptor(AtomicU32);

#[async_trait]
impl NodeInterceptor for CountingInterceptor {
    async fn before(&self, _: &NodeId, _: &Battlefield) -> InterceptorDecision {
        self.0.fetch_add(1, Ordering::SeqCst);
        InterceptorDecision::Continue
    }
}

#[tokio::test(start_paused = true)]
async fn a_hit_merges_the_stored_delta_with_zero_executions() {
    let runs = counter();
    let g = answer_graph(runs.clone(), CacheKeySpec::Default);
    let sink = CollectingTraceSink::new();
    let hooks = Arc::new(CountingInterceptor(AtomicU32::new(0)));
    let e = engine()
        .with_node_cache(InMemoryNodeCache::new())
        .with_trace_sink(sink.clone())
        .with_interceptor(hooks.clone());
    let first = run_to_state(&e, &g, "t1", json!({"question": "q"})).await;
    let second = run_to_state(&e, &g, "t2", json!({"question": "q"})).await;
    assert_eq!(first, second);
    assert_eq!(count(&runs), 1, "the second run was served from the cache");
    assert_eq!(
        hooks.0.load(Ordering::SeqCst),
        1,
        "a hit runs no interceptor"
    );

    let rec = records(&e, "t2").await;
    assert_eq!(
        (rec[0].status.clone(), rec[0].attempt, rec[0].cache_hit),
        (NodeStatus::Succeeded, 1, true)
    );
    assert!(!records(&e, "t1").await[0].cache_hit);
    let hits: Vec<bool> = sink
        .events()
        .into_iter()
        .filter_map(|ev| match ev {
            TraceEvent::NodeFinished {
                cache_hit,
                attempt: 1,
                ..
            } => Some(cache_hit),
            _ => None,
        })
        .collect();
    assert_eq!(hits, [false, true]);
}

#[tokio::test(start_paused = true)]
async fn the_ttl_is_a_hard_expiry_with_a_closed_boundary() {
    let runs = counter();
    let g = answer_graph(runs.clone(), CacheKeySpec::Default);
    let e = engine().with_node_cache(InMemoryNodeCache::new());
    e.start(&g, "t1", json!({"question": "q"})).await.unwrap();
    tokio::time::advance(Duration::from_secs(60) - Duration::from_nanos(1)).await;
    e.start(&g, "t2", json!({"question": "q"})).await.unwrap();
    assert_eq!(count(&runs), 1, "still fresh 1 ns before expiry");
    tokio::time::advance(Duration::from_nanos(1)).await;
    e.start(&g, "t3", json!({"question": "q"})).await.unwrap();
    assert_eq!(count(&runs), 2, "read at exactly expires_at is a miss");
}

#[tokio::test]
async fn the_key_follows_the_input_and_fields_narrow_it() {
    let runs = counter();
    let e = engine().with_node_cache(InMemoryNodeCache::new());
    let g = answer_graph(runs.clone(), CacheKeySpec::Default);
    e.start(&g, "a", json!({"question": "q1", "locale": "en"}))
        .await
        .unwrap();
    e.start(&g, "b", json!({"question": "q2", "locale": "en"}))
        .await
        .unwrap();
    e.start(&g, "c", json!({"question": "q1", "locale": "fr"}))
        .await
        .unwrap();
    assert_eq!(
        count(&runs),
        3,
        "the whole snapshot is the default key of a Function node"
    );

    let runs = counter();
    let narrow = answer_graph(
        runs.clone(),
        CacheKeySpec::Fields(vec![FieldName::new("question").unwrap()]),
    );
    e.start(&narrow, "d", json!({"question": "q1", "locale": "en"}))
        .await
        .unwrap();
    e.start(&narrow, "e", json!({"question": "q1", "locale": "fr"}))
        .await
        .unwrap();
    assert_eq!(count(&runs), 1, "Fields(question) ignores locale");
}

#[tokio::test]
async fn no_hit_crosses_graphs() {
    let runs = counter();
    let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    let e = engine().with_node_cache(cache);
    let g1 = answer_graph(runs.clone(), CacheKeySpec::Default);
    let mut g2 = answer_graph(runs.clone(), CacheKeySpec::Default);
    g2.add_node("extra", write("answer", json!("x")))
        .mark_dynamic_target("extra");
    e.start(&g1, "a", json!({"question": "q"})).await.unwrap();
    e.start(&g2, "b", json!({"question": "q"})).await.unwrap();
    assert_eq!(count(&runs), 2);
}

#[tokio::test]
async fn failures_gotos_and_ends_are_never_cached() {
    for (name, next) in [("goto", 1), ("end", 2), ("fail", 3)] {
        let runs = counter();
        let node = {
            let runs = runs.clone();
            NodeSpec::from_fn("varied", move |_, _| {
                runs.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    let d = delta(&[("out", json!(1))]);
                    match next {
                        1 => Ok(Directive::goto(d, "after")),
                        2 => Ok(Directive::end(d)),
                        _ => Err(StateNodeError::permanent("no")),
                    }
                })
            })
        };
        let mut g = chain(
            schema(&[("out", LastWrite), ("tail", LastWrite)]),
            vec![("n", node), ("after", write("tail", json!(1)))],
        );
        g.set_aegis("n", cached(Duration::from_secs(60), CacheKeySpec::Default));
        let e = engine().with_node_cache(InMemoryNodeCache::new());
        e.start(&g, "a", json!({})).await.unwrap();
        e.start(&g, "b", json!({})).await.unwrap();
        assert_eq!(count(&runs), 2, "{name} was cached");
    }
}

#[tokio::test]
async fn deny_fields_keep_deltas_out_of_the_cache() {
    let runs = counter();
    let node = {
        let runs = runs.clone();
        NodeSpec::from_fn("logger", move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(delta(&[("audit_log", json!("ran"))]).into()) })
        })
    };
    let s = BattlefieldSchema::new(vec![
        field("audit_log", Append).with_cache(CacheMarker::Deny),
    ]);
    let mut g = chain(s, vec![("n", node)]);
    g.set_aegis("n", cached(Duration::from_secs(60), CacheKeySpec::Default));
    let e = engine().with_node_cache(InMemoryNodeCache::new());
    e.start(&g, "a", json!({})).await.unwrap();
    e.start(&g, "b", json!({})).await.unwrap();
    assert_eq!(count(&runs), 2);
}

#[tokio::test]
async fn cache_policies_need_a_backend_and_declared_key_fields() {
    let g = answer_graph(counter(), CacheKeySpec::Default);
    let err = engine().start(&g, "t", json!({})).await.unwrap_err();
    assert!(
        matches!(err, EngineError::CachePolicyWithoutCacheBackend { ref nodes } if nodes == &[NodeId::new("answerer")])
    );

    let bad = answer_graph(
        counter(),
        CacheKeySpec::Fields(vec![FieldName::new("typo").unwrap()]),
    );
    let err = bad.validate().unwrap_err();
    assert!(
        format!("{err:?}").contains("CacheKeyFieldUndeclared"),
        "{err:?}"
    );
    assert!(err.to_string().contains("typo"));
}

/// A port that answers with the model name and counts calls.
struct EchoPort(AtomicU32);

#[async_trait]
impl PaladinPort for EchoPort {
    async fn execute(&self, paladin: &Paladin, input: &str) -> Result<PaladinResult, PaladinError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(PaladinResult::new(format!(
            "{} says: {input}",
            paladin.model
        )))
    }
}

fn paladin_graph(model: &str, template: &str) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "answerer",
        NodeSpec::paladin(
            Paladin::new("Answerer").with_model(model),
            InputMapping::new(template),
            FieldName::new("answer").unwrap(),
        ),
    )
    .add_edge(START, "answerer")
    .add_edge("answerer", END)
    .set_aegis(
        "answerer",
        cached(
            Duration::from_secs(900),
            CacheKeySpec::Fields(vec![FieldName::new("question").unwrap()]),
        ),
    );
    g
}

#[tokio::test]
async fn a_paladin_key_changes_with_the_prompt_and_the_model() {
    let port = Arc::new(EchoPort(AtomicU32::new(0)));
    let e = WarEngine::new(InMemoryWaypointStore::new())
        .with_paladin_port(port.clone())
        .with_node_cache(InMemoryNodeCache::new());
    let calls = || port.0.load(Ordering::SeqCst);
    let base = paladin_graph("m1", "Answer: {question}");
    let s = run_to_state(&e, &base, "a", json!({"question": "why"})).await;
    assert_eq!(s.get("answer"), Some(&json!("m1 says: Answer: why")));
    e.start(&base, "b", json!({"question": "why"}))
        .await
        .unwrap();
    assert_eq!(calls(), 1, "hit");
    e.start(
        &paladin_graph("m1", "Answer briefly: {question}"),
        "c",
        json!({"question": "why"}),
    )
    .await
    .unwrap();
    assert_eq!(calls(), 2, "prompt changed");
    e.start(
        &paladin_graph("m2", "Answer: {question}"),
        "d",
        json!({"question": "why"}),
    )
    .await
    .unwrap();
    assert_eq!(calls(), 3, "model changed");
    e.start(&base, "e", json!({"question": "how"}))
        .await
        .unwrap();
    assert_eq!(calls(), 4, "input changed");
}

#[tokio::test]
async fn a_paladin_output_field_marked_deny_is_rejected_under_a_cache_policy() {
    let mut g = paladin_graph("m", "{question}");
    g = {
        let mut h = WarGraph::new(
            BattlefieldSchema::new(vec![
                field("question", LastWrite),
                field("answer", LastWrite).with_cache(CacheMarker::Deny),
            ]),
            EngineLimits::default(),
        );
        for (id, spec) in g.nodes() {
            h.add_node(id.clone(), spec.clone());
        }
        h.add_edge(START, "answerer").add_edge("answerer", END);
        h.set_aegis(
            "answerer",
            g.aegis_for(&NodeId::new("answerer")).unwrap().clone(),
        );
        h
    };
    let err = g.validate().unwrap_err();
    assert!(
        format!("{err:?}").contains("CacheOutputFieldDenied"),
        "{err:?}"
    );
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn two_engines_share_hits_through_redis() {
    let prefix = format!("aegis-test-engine-{}", std::process::id());
    let redis = RedisNodeCache::connect("redis://127.0.0.1:6379", &prefix)
        .await
        .expect("Redis must be running on 127.0.0.1:6379 for the redis-cache tests");
    let cache: Arc<dyn NodeCache> = Arc::new(redis);
    cache.invalidate_all().await.unwrap();
    let runs = counter();
    let g = answer_graph(runs.clone(), CacheKeySpec::Default);
    let one = engine().with_node_cache(cache.clone());
    let two = engine().with_node_cache(cache.clone());
    let a = run_to_state(&one, &g, "a", json!({"question": "q"})).await;
    let b = run_to_state(&two, &g, "a", json!({"question": "q"})).await;
    assert_eq!(a, b);
    assert_eq!(count(&runs), 1);
    assert!(records(&two, "a").await[0].cache_hit);
    cache.invalidate_all().await.unwrap();
}

/// A backend recording the keys stored through it.
struct Recording {
    inner: Arc<InMemoryNodeCache>,
    keys: std::sync::Mutex<Vec<CacheKey>>,
}

#[async_trait]
impl NodeCache for Recording {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        self.keys.lock().unwrap().push(key.clone());
        self.inner.put(key, entry).await
    }
    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_prefix(prefix).await
    }
    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_all().await
    }
    fn clock(&self) -> Option<&CacheClock> {
        self.inner.clock()
    }
}

#[tokio::test]
async fn an_entry_that_does_not_fit_is_a_miss_the_run_completes_and_the_entry_is_overwritten() {
    let runs = counter();
    let g = answer_graph(
        runs.clone(),
        CacheKeySpec::Fields(vec![FieldName::new("question").unwrap()]),
    );
    let backend = Arc::new(Recording {
        inner: Arc::new(InMemoryNodeCache::new()),
        keys: Default::default(),
    });
    let e = engine().with_node_cache(backend.clone());
    let good = run_to_state(&e, &g, "warm", json!({"question": "q"})).await;
    e.start(&g, "other", json!({"question": "elsewhere"}))
        .await
        .unwrap();
    let [key, other_key] = <[CacheKey; 2]>::try_from(backend.keys.lock().unwrap().clone()).unwrap();
    assert_eq!(count(&runs), 2);
    let far = std::time::SystemTime::now() + Duration::from_secs(3600);

    let mut undeclared = StateDelta::new();
    undeclared.set("no_such_field", 1).unwrap();
    let mut copied = backend.inner.get(&other_key).await.unwrap().unwrap();
    copied.expires_at = far;
    let planted = [
        CacheEntry::new(key.clone(), undeclared, far),
        // Found under `key`, but recorded under another: another process
        // (or a hostile writer) copied it.
        copied,
    ];
    for (i, entry) in planted.into_iter().enumerate() {
        backend.inner.put(&key, &entry).await.unwrap();
        let thread = format!("after-plant-{i}");
        let outcome = e
            .start(&g, &thread, json!({"question": "q"}))
            .await
            .unwrap();
        assert_eq!(outcome.name(), "Completed", "{outcome:?}");
        assert_eq!(outcome.into_result().unwrap(), good);
        assert_eq!(count(&runs), 3 + i as u32, "the node executed");
        assert!(!records(&e, &thread).await[0].cache_hit);
        let now = backend.inner.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (now.key.clone(), now.delta.get("answer")),
            (key.clone(), Some(&json!("answer to \"q\"")))
        );
    }
    // A type its rule cannot take (an object into a Sum field).
    let g2 = {
        let runs = runs.clone();
        let node = NodeSpec::from_fn("count", move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(delta(&[("total", json!(1))]).into()) })
        });
        let mut g = chain(
            schema(&[("question", LastWrite), ("total", Sum)]),
            vec![("counter", node)],
        );
        g.set_aegis(
            "counter",
            cached(Duration::from_secs(60), CacheKeySpec::Default),
        );
        g
    };
    e.start(&g2, "sum-warm", json!({"question": "s"}))
        .await
        .unwrap();
    let sum_key = backend.keys.lock().unwrap().last().unwrap().clone();
    let mut bad_sum = StateDelta::new();
    bad_sum.set("total", json!({"not": "a number"})).unwrap();
    backend
        .inner
        .put(&sum_key, &CacheEntry::new(sum_key.clone(), bad_sum, far))
        .await
        .unwrap();
    let before = count(&runs);
    let state = run_to_state(&e, &g2, "sum-after", json!({"question": "s"})).await;
    assert_eq!(state.get("total"), Some(&json!(1)));
    assert_eq!(count(&runs), before + 1);
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn an_entry_another_process_wrote_to_redis_off_schema_is_a_miss() {
    let prefix = format!(
        "aegis-test-engine-misfit-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let cache = Arc::new(
        RedisNodeCache::connect("redis://127.0.0.1:6379", &prefix)
            .await
            .expect("Redis must be running on 127.0.0.1:6379 for the redis-cache tests"),
    );
    let mut admin = redis::Client::open("redis://127.0.0.1:6379")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let runs = counter();
    let g = answer_graph(runs.clone(), CacheKeySpec::Default);
    let e = engine().with_node_cache(cache.clone());
    let good = run_to_state(&e, &g, "warm", json!({"question": "q"})).await;
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(format!("{prefix}:*"))
        .arg("COUNT")
        .arg(1000)
        .query_async(&mut admin)
        .await
        .unwrap();
    let [redis_key] = <[String; 1]>::try_from(keys).unwrap();
    let key_text = redis_key
        .strip_prefix(&format!("{prefix}:"))
        .unwrap()
        .to_string();
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    // As another program would write it: the current format, this very
    // key, and a delta writing a field this graph does not declare.
    let raw = json!({
        "format": 2,
        "key": key_text,
        "expires_at": {"secs_since_epoch": far, "nanos_since_epoch": 0},
        "delta": {"writes": {"answer": "planted", "intruder": true}},
    });
    let _: () = redis::cmd("SET")
        .arg(&redis_key)
        .arg(raw.to_string())
        .query_async(&mut admin)
        .await
        .unwrap();
    let outcome = e
        .start(&g, "after", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(outcome.into_result().unwrap(), good);
    assert_eq!(count(&runs), 2, "the node executed");
    assert!(!records(&e, "after").await[0].cache_hit);
    let stored: String = redis::cmd("GET")
        .arg(&redis_key)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        stored.contains("answer to") && !stored.contains("intruder"),
        "overwritten by the fresh result: {stored}"
    );
    cache.invalidate_all().await.unwrap();
}
