//! Redis-only behaviour and fault tests, against the real server on
//! 127.0.0.1:6379: server-side expiry, prefix isolation, and what a paused
//! server or a killed connection does to a workload.
//!
//! Fault tests run on the real clock: they exercise real socket timeouts
//! and reconnection, which tokio's paused clock would short-circuit. They
//! assert outcomes (misses, completion, recovery), never durations.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::contract::on_redis::{
    URL, admin, own_server, redis_harness, share_server, unique_prefix, unreachable,
};
use super::contract::{delta, key};
use super::handle::StoreOutcome;
use super::{CacheEntry, CacheLookup, EntryMisfit, NodeCache, NodeCacheHandle, RedisNodeCache};
use crate::graph::Directive;
use crate::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};

async fn pttl(admin: &mut ::redis::aio::MultiplexedConnection, key: &str) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn entries_carry_a_server_side_expiry() {
    let h = redis_harness("pttl").await;
    let mut admin = h.admin.clone();
    let k = key("v6:g", "n", 1);
    let now = h.manual.now();
    h.cache
        .put(
            &k,
            &CacheEntry::new(
                k.clone(),
                delta(json!(1)),
                now + Duration::from_millis(10_000),
            ),
        )
        .await
        .unwrap();
    let redis_key = format!("{}:{}", h.cache.key_prefix(), k);
    let ms = pttl(&mut admin, &redis_key).await;
    assert!((9_000..=10_000).contains(&ms), "PTTL {ms}");

    // A sub-millisecond remainder rounds up: the server never drops an
    // entry the clock still calls fresh.
    let k2 = key("v6:g", "n", 2);
    h.cache
        .put(
            &k2,
            &CacheEntry::new(k2.clone(), delta(json!(2)), now + Duration::from_micros(1)),
        )
        .await
        .unwrap();
    let ms = pttl(&mut admin, &format!("{}:{}", h.cache.key_prefix(), k2)).await;
    assert!(ms == 1 || ms == 0 || ms == -2, "PTTL {ms}");

    // An entry already expired is not written at all.
    let k3 = key("v6:g", "n", 3);
    h.cache
        .put(&k3, &CacheEntry::new(k3.clone(), delta(json!(3)), now))
        .await
        .unwrap();
    let exists: i64 = ::redis::cmd("EXISTS")
        .arg(format!("{}:{}", h.cache.key_prefix(), k3))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn invalidation_never_leaves_its_own_key_prefix() {
    let _server = share_server().await;
    let base = unique_prefix("isolation");
    // A sibling prefix, and one that differs only where a glob would match.
    let mine = RedisNodeCache::connect(URL, format!("{base}:*a"))
        .await
        .unwrap_or_else(|e| unreachable(e));
    let sibling = RedisNodeCache::connect(URL, format!("{base}:xa"))
        .await
        .unwrap_or_else(|e| unreachable(e));
    let neighbour = RedisNodeCache::connect(URL, format!("{base}:*a2"))
        .await
        .unwrap_or_else(|e| unreachable(e));
    let expires_at = SystemTime::now() + Duration::from_secs(600);
    let k = key("v6:g", "n", 1);
    for cache in [&mine, &sibling, &neighbour] {
        cache
            .put(&k, &CacheEntry::new(k.clone(), delta(json!(1)), expires_at))
            .await
            .unwrap();
    }
    assert_eq!(mine.invalidate_all().await.unwrap(), 1);
    assert_eq!(mine.get(&k).await.unwrap(), None);
    assert!(sibling.get(&k).await.unwrap().is_some());
    assert!(neighbour.get(&k).await.unwrap().is_some());
    sibling.invalidate_all().await.unwrap();
    neighbour.invalidate_all().await.unwrap();
}

#[tokio::test]
async fn invalidation_walks_every_scan_page() {
    let h = redis_harness("scan-pages").await;
    let expires_at = h.manual.now() + Duration::from_secs(600);
    // Several SCAN pages' worth (SCAN_COUNT is 500).
    let n = 1_200u64;
    let mut admin = h.admin.clone();
    let mut pipe = ::redis::pipe();
    // Invalidation never reads entries, so one entry's bytes serve all.
    let bytes = CacheEntry::new(key("v6:g", "n", 0), delta(json!(1)), expires_at)
        .to_bytes()
        .unwrap();
    for t in 0..n {
        pipe.cmd("SET")
            .arg(format!("{}:{}", h.cache.key_prefix(), key("v6:g", "n", t)))
            .arg(&bytes)
            .arg("PX")
            .arg(600_000)
            .ignore();
    }
    let _: () = pipe.query_async(&mut admin).await.unwrap();
    assert_eq!(h.cache.invalidate_all().await.unwrap(), n);
}

fn schema() -> BattlefieldSchema {
    BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("answer").unwrap(),
        DispatchRule::LastWrite,
        None,
        false,
    )])
}

/// One cached activation: look up, on a miss "run the node" (compute its
/// answer) and store. Returns the answer it ended with and whether it hit.
async fn activation(handle: &NodeCacheHandle, task: u64) -> (serde_json::Value, bool) {
    let k = key("v6:workload", "worker", task);
    match handle.lookup(&schema(), &k).await {
        CacheLookup::Hit(entry) => (entry.delta.get("answer").unwrap().clone(), true),
        _ => {
            let answer = json!(task * 10);
            let stored = handle
                .store(
                    &schema(),
                    &k,
                    &Directive::edges(delta(answer.clone())),
                    Duration::from_secs(600),
                )
                .await;
            assert!(
                matches!(
                    stored,
                    StoreOutcome::Stored { .. } | StoreOutcome::Failed(_)
                ),
                "{stored:?}"
            );
            (answer, false)
        }
    }
}

/// Polls until task `task` is served from the cache again, within `limit`.
async fn recovers(handle: &NodeCacheHandle, task: u64, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if activation(handle, task).await.1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_turns_lookups_into_misses_and_the_cache_recovers() {
    let _server = own_server().await;
    let cache = RedisNodeCache::builder(URL, unique_prefix("pause"))
        .command_timeout(Duration::from_millis(50))
        .connect()
        .await
        .unwrap_or_else(|e| unreachable(e));
    let handle = NodeCacheHandle::new(Arc::new(cache));
    for task in 0..4 {
        assert_eq!(activation(&handle, task).await, (json!(task * 10), false));
        assert_eq!(activation(&handle, task).await, (json!(task * 10), true));
    }

    // Short, so other clients of the shared server barely notice; still
    // many command timeouts long.
    let mut admin = admin().await;
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("ALL")
        .query_async(&mut admin)
        .await
        .unwrap();

    // During the pause every lookup fails within its timeout: a miss.
    let k = key("v6:workload", "worker", 0);
    let during = handle.lookup(&schema(), &k).await;
    assert!(
        matches!(
            during,
            CacheLookup::Failed(super::NodeCacheError::Timeout { .. })
        ),
        "{during:?}"
    );
    // The workload completes with the right answers, hit or miss.
    let results = futures::future::join_all((0..4).map(|t| activation(&handle, t))).await;
    for (task, (answer, _)) in results.into_iter().enumerate() {
        assert_eq!(answer, json!(task as u64 * 10));
    }

    // Once the pause ends, entries written before it are served again.
    assert!(recovers(&handle, 3, Duration::from_secs(10)).await);
    for task in 0..4 {
        assert_eq!(activation(&handle, task).await, (json!(task * 10), true));
    }
    handle.backend().invalidate_all().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_turns_lookups_into_misses_and_reconnects() {
    let _server = share_server().await;
    let cache = Arc::new(
        RedisNodeCache::builder(URL, unique_prefix("kill"))
            .command_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap_or_else(|e| unreachable(e)),
    );
    let handle = NodeCacheHandle::new(cache.clone());
    for task in 0..4 {
        activation(&handle, task).await;
        assert!(activation(&handle, task).await.1);
    }
    let before = cache.client_id().await.unwrap();

    let mut admin = admin().await;
    let killed: i64 = ::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(before)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(killed, 1);

    // The first command on the dead connection fails: a miss, not a hang.
    let first = handle
        .lookup(&schema(), &key("v6:workload", "worker", 0))
        .await;
    assert!(matches!(first, CacheLookup::Failed(_)), "{first:?}");
    let results = futures::future::join_all((0..4).map(|t| activation(&handle, t))).await;
    for (task, (answer, _)) in results.into_iter().enumerate() {
        assert_eq!(answer, json!(task as u64 * 10));
    }

    // The manager reconnected on a new connection; entries are served again.
    assert!(recovers(&handle, 3, Duration::from_secs(10)).await);
    assert_ne!(cache.client_id().await.unwrap(), before);
    for task in 0..4 {
        assert!(activation(&handle, task).await.1, "task {task}");
    }
    cache.invalidate_all().await.unwrap();
}

/// A private `redis-server` on a free loopback port, stopped on drop, so a
/// restart test never disturbs the shared server.
struct PrivateServer {
    child: std::process::Child,
    port: u16,
}

impl PrivateServer {
    fn start(port: u16) -> PrivateServer {
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `redis-server` for the restart test ({e}); it needs the Redis server binary on PATH")
            });
        PrivateServer { child, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Waits (bounded) until the server answers PING.
    async fn ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(client) = ::redis::Client::open(self.url())
                && let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && ::redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .is_ok()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the private redis-server on port {} did not come up",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_reconnects_after_a_server_restart() {
    let port = free_port();
    let mut server = PrivateServer::start(port);
    server.ready().await;
    let cache = RedisNodeCache::builder(server.url(), "aegis-test:restart")
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let handle = NodeCacheHandle::new(Arc::new(cache));
    activation(&handle, 1).await;
    assert!(activation(&handle, 1).await.1);

    server.stop();
    // Down: every activation still completes, as a miss.
    for task in 0..3 {
        let (answer, hit) = activation(&handle, task).await;
        assert_eq!((answer, hit), (json!(task * 10), false));
    }

    // Back (empty: it keeps nothing on disk). A stored result is served again
    // once the manager has reconnected.
    let server = PrivateServer::start(port);
    server.ready().await;
    assert!(recovers(&handle, 2, Duration::from_secs(10)).await);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_started_while_redis_is_down_serves_misses_then_connects() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    // Nothing listens yet: the program starts anyway.
    let cache = RedisNodeCache::builder(url.as_str(), "aegis-test:late")
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("a cache is best effort from the start");
    let handle = NodeCacheHandle::new(Arc::new(cache));
    for task in 0..3 {
        // Misses, each activation computing its own answer.
        assert_eq!(activation(&handle, task).await, (json!(task * 10), false));
        assert_eq!(activation(&handle, task).await, (json!(task * 10), false));
    }
    let server = PrivateServer::start(port);
    server.ready().await;
    // Connected in the background: stored results are served.
    assert!(recovers(&handle, 1, Duration::from_secs(15)).await);
    drop(server);
}

#[tokio::test]
async fn what_no_retry_can_fix_still_fails_connect() {
    let bad_url = RedisNodeCache::connect("http://127.0.0.1:6379", "p").await;
    assert!(
        matches!(bad_url, Err(super::NodeCacheError::Config { .. })),
        "{bad_url:?}"
    );
    let no_prefix = RedisNodeCache::connect(URL, "").await;
    assert!(
        matches!(no_prefix, Err(super::NodeCacheError::Config { .. })),
        "{no_prefix:?}"
    );
    // The shared server has no ACL user of this name: refused.
    let refused = RedisNodeCache::builder("redis://nobody-aegis@127.0.0.1:6379", "p")
        .password("wrong")
        .connect()
        .await;
    assert!(
        matches!(&refused, Err(super::NodeCacheError::Unavailable { message, .. }) if !message.contains("wrong")),
        "{refused:?}"
    );
}

/// Writes `bytes` under `key` of `h`'s prefix, as another process sharing
/// the server would.
async fn plant(h: &super::contract::on_redis::Redis, k: &super::CacheKey, bytes: &[u8]) {
    let mut admin = h.admin.clone();
    let _: () = ::redis::cmd("SET")
        .arg(format!("{}:{}", h.cache.key_prefix(), k))
        .arg(bytes)
        .arg("PX")
        .arg(600_000)
        .query_async(&mut admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_entry_another_process_wrote_off_schema_is_a_miss_then_overwritten() {
    let h = redis_harness("misfit").await;
    let handle = NodeCacheHandle::new(h.cache.clone());
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            FieldName::new("answer").unwrap(),
            DispatchRule::LastWrite,
            None,
            false,
        ),
        FieldSpec::new(
            FieldName::new("total").unwrap(),
            DispatchRule::Sum,
            None,
            false,
        ),
    ]);
    let k = key("v6:g", "n", 1);
    let expiry = h.manual.now() + Duration::from_secs(600);
    let secs = expiry
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (writes, field) in [
        (json!({"undeclared": 1}), "undeclared"),
        (json!({"answer": "ok", "total": "12"}), "total"),
    ] {
        // Written by hand, as another program would: the current format
        // and this very key, but a delta this graph cannot merge.
        let raw = json!({
            "format": 2,
            "key": k.to_string(),
            "expires_at": {"secs_since_epoch": secs, "nanos_since_epoch": 0},
            "delta": {"writes": writes},
        });
        plant(&h, &k, raw.to_string().as_bytes()).await;
        match handle.lookup(&schema, &k).await {
            CacheLookup::Misfit(
                EntryMisfit::UndeclaredField { field: f }
                | EntryMisfit::DispatchMismatch { field: f, .. },
            ) => assert_eq!(f.as_str(), field),
            other => panic!("{other:?}"),
        }
        let mut fresh = StateDelta::new();
        fresh.set("answer", "fresh").unwrap();
        let out = handle
            .store(
                &schema,
                &k,
                &Directive::edges(fresh),
                Duration::from_secs(60),
            )
            .await;
        assert!(matches!(out, StoreOutcome::Stored { .. }), "{out:?}");
        let hit = handle.lookup(&schema, &k).await.into_hit().unwrap();
        assert_eq!(hit.delta.get("answer"), Some(&json!("fresh")));
    }
}

#[tokio::test]
async fn an_entry_copied_under_another_key_is_a_miss() {
    let h = redis_harness("copied").await;
    let handle = NodeCacheHandle::new(h.cache.clone());
    let (original, copy) = (key("v6:g", "n", 1), key("v6:g", "n", 2));
    let mut d = StateDelta::new();
    d.set("answer", "for task 1").unwrap();
    let out = handle
        .store(
            &schema(),
            &original,
            &Directive::edges(d),
            Duration::from_secs(60),
        )
        .await;
    assert!(matches!(out, StoreOutcome::Stored { .. }), "{out:?}");
    let mut admin = h.admin.clone();
    let bytes: Vec<u8> = ::redis::cmd("GET")
        .arg(format!("{}:{}", h.cache.key_prefix(), original))
        .query_async(&mut admin)
        .await
        .unwrap();
    plant(&h, &copy, &bytes).await;
    assert_eq!(
        handle.lookup(&schema(), &copy).await,
        CacheLookup::Misfit(EntryMisfit::OtherKey {
            stored_under: original.clone()
        })
    );
    assert!(handle.lookup(&schema(), &original).await.is_hit());
}

#[tokio::test]
async fn an_oversized_entry_is_neither_stored_nor_read_past_the_bound() {
    let _server = share_server().await;
    let cache = RedisNodeCache::builder(URL, unique_prefix("oversized"))
        .max_entry_bytes(1_024)
        .connect()
        .await
        .unwrap_or_else(|e| unreachable(e));
    let expires_at = SystemTime::now() + Duration::from_secs(600);
    let k = key("v6:g", "n", 1);
    let small = CacheEntry::new(k.clone(), delta(json!("fits")), expires_at);
    cache.put(&k, &small).await.unwrap();
    assert_eq!(cache.get(&k).await.unwrap(), Some(small));

    let big = CacheEntry::new(k.clone(), delta(json!("x".repeat(2_000))), expires_at);
    let err = cache.put(&k, &big).await.unwrap_err();
    assert!(matches!(err, super::NodeCacheError::Encode { .. }), "{err}");

    // Another process writes a huge value under the key: a miss, read no
    // further than the bound.
    let mut admin = admin().await;
    let huge = format!("{{\"format\":2,\"pad\":\"{}\"}}", "y".repeat(4 << 20));
    let _: () = ::redis::cmd("SET")
        .arg(format!("{}:{}", cache.key_prefix(), k))
        .arg(huge)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(cache.get(&k).await.unwrap(), None);
    assert_eq!(cache.invalidate_all().await.unwrap(), 1);
}
