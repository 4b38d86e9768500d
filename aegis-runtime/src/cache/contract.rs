//! The one contract suite every `NodeCache` backend runs.
//!
//! Each case is a generic async function over a [`Harness`]; the
//! `contract_suite!` macro instantiates every case for one backend. The
//! in-memory backend runs on tokio's paused clock; the Redis backend, whose
//! real connection cannot run on a paused clock (its timeouts would fire at
//! once), runs on a [`ManualClock`] — both advance by exact durations.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::key::derive_key;
use super::{CacheClock, CacheEntry, CacheKey, InMemoryNodeCache, NodeCache};
use crate::error::StateNodeError;
use crate::graph::NodeContext;
use crate::graph::{Directive, NodeSpec, StateNode};
use crate::id::NodeId;
use crate::policy::CacheKeySpec;
use crate::state::{Battlefield, StateDelta};

/// One backend under test, with control over its clock and raw storage.
pub(crate) trait Harness {
    /// The backend.
    fn cache(&self) -> Arc<dyn NodeCache>;
    /// The clock the backend judges expiry by.
    fn clock(&self) -> CacheClock;
    /// Moves the backend's clock forward by exactly `by`.
    async fn advance(&self, by: Duration);
    /// Stores `bytes` under `key` as the backend would store an entry.
    async fn plant_raw(&self, key: &CacheKey, bytes: &[u8]);
}

struct Noop;
#[async_trait::async_trait]
impl StateNode for Noop {
    fn kind_name(&self) -> &str {
        "noop"
    }

    async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        Ok(Directive::edges(StateDelta::new()))
    }
}

/// A real key: graph `graph`, node `node`, task `task`.
pub(crate) fn key(graph: &str, node: &str, task: u64) -> CacheKey {
    derive_key(
        graph,
        &NodeId::new(node),
        &NodeSpec::function(Noop),
        &CacheKeySpec::Default,
        &Battlefield::new(),
        Some((&task.to_string(), &Value::Null)),
    )
    .unwrap()
}

pub(crate) fn delta(value: Value) -> StateDelta {
    let mut d = StateDelta::new();
    d.set("answer", value).unwrap();
    d
}

fn entry_for(h: &impl Harness, k: &CacheKey, value: Value, ttl: Duration) -> CacheEntry {
    CacheEntry::new(k.clone(), delta(value), h.clock().now() + ttl)
}

const TTL: Duration = Duration::from_secs(600);

/// What `get` serves under `k`, checked, for the in-memory backend, to be
/// exactly what the engine's lookups are served (they skip `get` for it):
/// the contract holds for both.
async fn got(cache: &Arc<dyn NodeCache>, k: &CacheKey) -> Option<CacheEntry> {
    let owned = cache.get(k).await.unwrap();
    if let Some(memory) = InMemoryNodeCache::recognise(cache) {
        let now = memory.clock().unwrap().now();
        let shared = memory.lookup_at(k, now).unwrap();
        assert_eq!(
            owned.as_ref(),
            shared.as_deref(),
            "get and the engine's lookup differ"
        );
    }
    owned
}

pub(crate) async fn round_trip(h: impl Harness) {
    let cache = h.cache();
    let k = key("v6:g", "answerer", 1);
    assert_eq!(got(&cache, &k).await, None);

    let first = entry_for(
        &h,
        &k,
        json!({"text": "42", "n": [1, 2.5, null, true]}),
        TTL,
    );
    cache.put(&k, &first).await.unwrap();
    assert_eq!(got(&cache, &k).await, Some(first));

    let second = entry_for(&h, &k, json!("replaced"), TTL);
    cache.put(&k, &second).await.unwrap();
    assert_eq!(got(&cache, &k).await, Some(second));

    assert_eq!(got(&cache, &key("v6:g", "answerer", 2)).await, None);
}

pub(crate) async fn expiry(h: impl Harness) {
    let cache = h.cache();
    let k = key("v6:g", "n", 1);
    cache
        .put(&k, &entry_for(&h, &k, json!(1), Duration::from_secs(10)))
        .await
        .unwrap();
    h.advance(Duration::from_secs(5)).await;
    assert!(got(&cache, &k).await.is_some());
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(got(&cache, &k).await, None);

    // An entry already expired when stored is never served.
    let late = key("v6:g", "n", 2);
    let stale = CacheEntry::new(
        late.clone(),
        delta(json!(2)),
        h.clock().now() - Duration::from_secs(1),
    );
    cache.put(&late, &stale).await.unwrap();
    assert_eq!(got(&cache, &late).await, None);
}

pub(crate) async fn closed_boundary(h: impl Harness) {
    let cache = h.cache();
    let k = key("v6:g", "n", 1);
    let ttl = Duration::from_secs(30);
    let entry = entry_for(&h, &k, json!("v"), ttl);
    cache.put(&k, &entry).await.unwrap();

    h.advance(ttl - Duration::from_nanos(1)).await;
    assert_eq!(got(&cache, &k).await, Some(entry.clone()));
    h.advance(Duration::from_nanos(1)).await;
    assert_eq!(h.clock().now(), entry.expires_at);
    assert_eq!(got(&cache, &k).await, None);
}

pub(crate) async fn invalidation(h: impl Harness) {
    let cache = h.cache();
    let (ga, gb) = ("v6:graph-a", "v6:graph-b");
    let mut a1 = Vec::new();
    let mut a2 = Vec::new();
    let mut b1 = Vec::new();
    for t in 0..5 {
        a1.push(key(ga, "one", t));
        a2.push(key(ga, "two", t));
        b1.push(key(gb, "one", t));
    }
    for k in a1.iter().chain(&a2).chain(&b1) {
        cache
            .put(k, &entry_for(&h, k, json!(1), TTL))
            .await
            .unwrap();
    }

    let node_prefix = CacheKey::node_prefix(ga, &NodeId::new("one"));
    assert_eq!(cache.invalidate_prefix(&node_prefix).await.unwrap(), 5);
    for k in &a1 {
        assert_eq!(got(&cache, k).await, None);
    }
    for k in a2.iter().chain(&b1) {
        assert!(got(&cache, k).await.is_some());
    }
    // A prefix matching nothing removes nothing.
    assert_eq!(cache.invalidate_prefix(&node_prefix).await.unwrap(), 0);
    // A glob-looking prefix is taken literally.
    assert_eq!(cache.invalidate_prefix("*").await.unwrap(), 0);

    assert_eq!(
        cache
            .invalidate_prefix(&CacheKey::graph_prefix(ga))
            .await
            .unwrap(),
        5
    );
    for k in &b1 {
        assert!(got(&cache, k).await.is_some());
    }

    assert_eq!(cache.invalidate_all().await.unwrap(), 5);
    for k in &b1 {
        assert_eq!(got(&cache, k).await, None);
    }
    assert_eq!(cache.invalidate_all().await.unwrap(), 0);
}

pub(crate) async fn concurrent_writers(h: impl Harness) {
    const WRITERS: u64 = 8;
    const ROUNDS: u64 = 10;
    const KEYS: u64 = 4;
    let cache = h.cache();
    let expires_at = h.clock().now() + TTL;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let cache = cache.clone();
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let k = key("v6:g", "shared", (w + r) % KEYS);
                let value = json!({"writer": w, "round": r, "pad": "x".repeat(256)});
                cache
                    .put(&k, &CacheEntry::new(k.clone(), delta(value), expires_at))
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let written: BTreeSet<(u64, u64)> = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| (w, r)))
        .collect();
    for k in 0..KEYS {
        let got = got(&cache, &key("v6:g", "shared", k)).await.unwrap();
        let v = got.delta.get("answer").unwrap();
        let (w, r) = (v["writer"].as_u64().unwrap(), v["round"].as_u64().unwrap());
        // Whole, and one of the entries actually written under this key.
        assert!(written.contains(&(w, r)));
        assert_eq!((w + r) % KEYS, k);
        assert_eq!(v["pad"].as_str().unwrap().len(), 256);
    }
}

pub(crate) async fn large_values(h: impl Harness) {
    let cache = h.cache();
    let k = key("v6:g", "big", 1);
    let big: String = (0..4 * 1024 * 1024)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let list: Vec<u64> = (0..50_000).collect();
    let entry = entry_for(&h, &k, json!({"text": big, "list": list}), TTL);
    cache.put(&k, &entry).await.unwrap();
    assert_eq!(got(&cache, &k).await, Some(entry));
}

pub(crate) async fn corrupt_entry(h: impl Harness) {
    let cache = h.cache();
    let k = key("v6:g", "n", 1);
    for garbage in [
        &b"\x00\xffnot json at all"[..],
        b"{\"format\":99,\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{}}}",
        b"{\"format\":1,\"delta\":{\"writes\":{\"answer\":1}}}",
        b"",
    ] {
        h.plant_raw(&k, garbage).await;
        assert_eq!(got(&cache, &k).await, None, "{garbage:?}");
    }
    // The miss's re-run stores over it.
    let entry = entry_for(&h, &k, json!("fresh"), TTL);
    cache.put(&k, &entry).await.unwrap();
    assert_eq!(got(&cache, &k).await, Some(entry));
}

/// Instantiates every contract case as a test, with `$attr` as its test
/// attribute and `$make` building a fresh harness.
macro_rules! contract_suite {
    (#[$attr:meta] $make:expr) => {
        #[$attr]
        async fn round_trip() {
            crate::cache::contract::round_trip($make).await
        }
        #[$attr]
        async fn expiry() {
            crate::cache::contract::expiry($make).await
        }
        #[$attr]
        async fn closed_boundary() {
            crate::cache::contract::closed_boundary($make).await
        }
        #[$attr]
        async fn invalidation() {
            crate::cache::contract::invalidation($make).await
        }
        #[$attr]
        async fn concurrent_writers() {
            crate::cache::contract::concurrent_writers($make).await
        }
        #[$attr]
        async fn large_values() {
            crate::cache::contract::large_values($make).await
        }
        #[$attr]
        async fn corrupt_entry() {
            crate::cache::contract::corrupt_entry($make).await
        }
    };
}

mod in_memory {
    use super::*;
    use std::time::SystemTime;

    struct Memory(Arc<InMemoryNodeCache>);

    impl Harness for Memory {
        fn cache(&self) -> Arc<dyn NodeCache> {
            self.0.clone()
        }
        fn clock(&self) -> CacheClock {
            self.0.clock().unwrap().clone()
        }
        async fn advance(&self, by: Duration) {
            tokio::time::advance(by).await;
        }
        async fn plant_raw(&self, key: &CacheKey, bytes: &[u8]) {
            let far = SystemTime::now() + Duration::from_secs(3600 * 24);
            self.0.plant_raw(key, bytes, far);
        }
    }

    fn memory() -> Memory {
        Memory(Arc::new(InMemoryNodeCache::new()))
    }

    contract_suite!(
        #[tokio::test(start_paused = true)]
        memory()
    );
}

#[cfg(feature = "redis-cache")]
pub(crate) mod on_redis {
    use super::*;
    use crate::cache::{ManualClock, RedisNodeCache};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::SystemTime;

    pub(crate) const URL: &str = "redis://127.0.0.1:6379";

    /// A key prefix no other test, run or process shares.
    pub(crate) fn unique_prefix(label: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!(
            "aegis-test:{label}:{}:{nanos}:{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub(crate) fn unreachable(e: impl std::fmt::Display) -> ! {
        panic!(
            "Redis at 127.0.0.1:6379 is unreachable ({e}); the redis-cache tests need a running server"
        )
    }

    /// A plain connection for poking at the server behind the cache's back.
    pub(crate) async fn admin() -> ::redis::aio::MultiplexedConnection {
        let client = ::redis::Client::open(URL).unwrap_or_else(|e| unreachable(e));
        client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| unreachable(e))
    }

    /// Tests that pause the whole server take this exclusively; every other
    /// Redis test shares it, so no test of this process sees a pause it
    /// did not ask for.
    static SERVER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

    /// Shared use of the server.
    pub(crate) async fn share_server() -> tokio::sync::RwLockReadGuard<'static, ()> {
        SERVER.read().await
    }

    /// Exclusive use of the server, to pause it.
    pub(crate) async fn own_server() -> tokio::sync::RwLockWriteGuard<'static, ()> {
        SERVER.write().await
    }

    pub(crate) struct Redis {
        pub(crate) cache: Arc<RedisNodeCache>,
        pub(crate) manual: ManualClock,
        pub(crate) admin: ::redis::aio::MultiplexedConnection,
        _server: tokio::sync::RwLockReadGuard<'static, ()>,
    }

    pub(crate) async fn redis_harness(label: &str) -> Redis {
        let server = share_server().await;
        let manual = ManualClock::new(SystemTime::now());
        let cache = RedisNodeCache::builder(URL, unique_prefix(label))
            .clock(manual.clock())
            // Generous: the large-value case moves megabytes, and the
            // machine is shared; fault tests set their own.
            .command_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap_or_else(|e| unreachable(e));
        Redis {
            cache: Arc::new(cache),
            manual,
            admin: admin().await,
            _server: server,
        }
    }

    impl Harness for Redis {
        fn cache(&self) -> Arc<dyn NodeCache> {
            self.cache.clone()
        }
        fn clock(&self) -> CacheClock {
            self.manual.clock()
        }
        async fn advance(&self, by: Duration) {
            self.manual.advance(by);
        }
        async fn plant_raw(&self, key: &CacheKey, bytes: &[u8]) {
            let mut admin = self.admin.clone();
            let _: () = ::redis::cmd("SET")
                .arg(format!("{}:{}", self.cache.key_prefix(), key))
                .arg(bytes)
                .arg("PX")
                .arg(60_000)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    }

    // Leftovers expire server-side (every entry here has a finite PX).
    contract_suite!(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        redis_harness("contract").await
    );
}
