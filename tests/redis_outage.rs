//! A Redis outage under load: 200 runs of a graph with two cached nodes on
//! one engine backed by `RedisNodeCache` (the real server on
//! 127.0.0.1:6379), while the server is paused (`CLIENT PAUSE`) and the
//! cache's connections are killed (`CLIENT KILL`). Every run must complete
//! with the correct state, and hits must come back after recovery.
//!
//! The cache connects as its own ACL user, so `CLIENT KILL USER` hits its
//! connections and nobody else's. Runs on the real clock: socket timeouts
//! and reconnection are what is under test. Pauses are 300 ms, so other
//! clients of the shared server barely notice.
#![cfg(feature = "redis-cache")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use aegis::cache::NodeCache;
use aegis::cache::RedisNodeCache;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::fixtures::field;

const ADMIN_URL: &str = "redis://127.0.0.1:6379";
const RUNS: u64 = 200;
const BATCH: u64 = 10;
const INPUTS: u64 = 25;

/// `a` (cached on `x`) writes y = 2x; `b` (cached on its snapshot) writes
/// z = y + 1; `c` (uncached) writes out = 10z. Counts real executions.
fn graph(executions: &Arc<AtomicU32>) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        field("x", DispatchRule::LastWrite),
        field("y", DispatchRule::LastWrite),
        field("z", DispatchRule::LastWrite),
        field("out", DispatchRule::LastWrite),
    ]);
    let step = |from: &'static str, to: &'static str, f: fn(i64) -> i64| {
        let executions = executions.clone();
        NodeSpec::from_fn(to, move |state, _| {
            executions.fetch_add(1, Ordering::SeqCst);
            let v = state.get(from).and_then(|v| v.as_i64()).unwrap_or(-1);
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set(to, f(v))?;
                Ok(d.into())
            })
        })
    };
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node("a", step("x", "y", |x| 2 * x))
        .add_node("b", step("y", "z", |y| y + 1))
        .add_node("c", step("z", "out", |z| 10 * z))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END);
    let cached = |key| Aegis::new().with_cache(CachePolicy::new(Duration::from_secs(600), key));
    g.set_aegis(
        "a",
        cached(CacheKeySpec::Fields(vec![FieldName::new("x").unwrap()])),
    );
    g.set_aegis("b", cached(CacheKeySpec::Default));
    g
}

async fn admin() -> redis::aio::MultiplexedConnection {
    redis::Client::open(ADMIN_URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| {
            panic!("Redis at 127.0.0.1:6379 is unreachable ({e}); this test needs it")
        })
}

async fn cmd(admin: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> redis::Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(admin).await.unwrap()
}

/// How one run went: its input and whether each cached node was a hit.
struct Run {
    x: u64,
    hits: usize,
}

async fn run(engine: &WarEngine, graph: &WarGraph, thread: String, x: u64) -> Run {
    let out = engine
        .start(graph, &thread, json!({ "x": x }))
        .await
        .unwrap_or_else(|e| panic!("{thread}: refused: {e}"));
    let state = out
        .into_result()
        .unwrap_or_else(|e| panic!("{thread} did not complete: {e}"));
    let x = x as i64;
    assert_eq!(state.get("y"), Some(&json!(2 * x)), "{thread}");
    assert_eq!(state.get("z"), Some(&json!(2 * x + 1)), "{thread}");
    assert_eq!(state.get("out"), Some(&json!(10 * (2 * x + 1))), "{thread}");
    let hits = engine
        .store()
        .history(&thread)
        .await
        .unwrap()
        .iter()
        .flat_map(|w| &w.records)
        .filter(|r| r.cache_hit)
        .count();
    Run { x: x as u64, hits }
}

async fn batch(engine: &WarEngine, graph: &WarGraph, label: &str, first: u64) -> Vec<Run> {
    futures::future::join_all(
        (first..first + BATCH).map(|r| run(engine, graph, format!("{label}-{r}"), r % INPUTS)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_a_paused_server_and_killed_connections() {
    let mut admin = admin().await;
    let user = format!("aegis-outage-{}", std::process::id());
    cmd(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            &user,
            "reset",
            "on",
            ">outage-pw",
            "~*",
            "+@all",
        ],
    )
    .await;
    let prefix = format!("aegis-test:outage:{}", std::process::id());
    let cache = Arc::new(
        RedisNodeCache::builder(format!("redis://{user}:outage-pw@127.0.0.1:6379"), prefix)
            .command_timeout(Duration::from_millis(100))
            .connect()
            .await
            .unwrap(),
    );
    cache.invalidate_all().await.unwrap();
    let executions = Arc::new(AtomicU32::new(0));
    let g = graph(&executions);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_node_cache(cache.clone());

    let mut runs: Vec<Run> = Vec::new();
    let mut outage_misses = 0;
    for b in 0..RUNS / BATCH {
        let first = b * BATCH;
        match b {
            // The whole server stops answering for 300 ms, under load.
            6 | 12 => {
                cmd(&mut admin, &["CLIENT", "PAUSE", "300", "ALL"]).await;
                let during = batch(&engine, &g, "pause", first).await;
                outage_misses += during.iter().filter(|r| r.hits < 2).count();
                runs.extend(during);
                continue;
            }
            // The cache's connections die between two batches ...
            9 => {
                cmd(&mut admin, &["CLIENT", "KILL", "USER", &user]).await;
            }
            // ... and in the middle of one.
            15 => {
                let mut killer = admin.clone();
                let user = user.clone();
                let kill = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    cmd(&mut killer, &["CLIENT", "KILL", "USER", &user]).await;
                });
                runs.extend(batch(&engine, &g, "kill", first).await);
                kill.await.unwrap();
                continue;
            }
            _ => {}
        }
        runs.extend(batch(&engine, &g, "run", first).await);
    }
    assert_eq!(runs.len() as u64, RUNS, "no run lost");
    assert!(
        outage_misses > 0,
        "a paused server must turn some warm lookups into misses"
    );

    // After recovery the cache serves again: warm every input once more
    // (entries written during an outage may be missing), then every run
    // must be served from the cache for both cached nodes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let probe = run(
            &engine,
            &g,
            "probe".to_string() + &runs.len().to_string(),
            0,
        )
        .await;
        runs.push(probe);
        if runs.last().is_some_and(|r| r.hits == 2) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cache did not recover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for x in 0..INPUTS {
        run(&engine, &g, format!("warm-{x}"), x).await;
    }
    let before = executions.load(Ordering::SeqCst);
    for x in 0..INPUTS {
        let r = run(&engine, &g, format!("after-{x}"), x).await;
        assert_eq!((r.x, r.hits), (x, 2), "hits resume after recovery");
    }
    // Only the uncached node ran.
    assert_eq!(executions.load(Ordering::SeqCst) - before, INPUTS as u32);

    cache.invalidate_all().await.unwrap();
    cmd(&mut admin, &["ACL", "DELUSER", &user]).await;
}
