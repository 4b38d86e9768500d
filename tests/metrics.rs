//! Prometheus metrics (feature `metrics`): one engine run with a retry, a
//! timeout, a fallback hop past an opened breaker and a cache hit, and one
//! fleet round on SQLite with a takeover, then a scrape of `/metrics` over
//! HTTP that must tell the same story.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::error::LlmError;
use aegis::graph::{EngineLimits, InputMapping, NodeSpec};
use aegis::llm::{CircuitBreaker, FallbackLlmAdapter, MockLlmAdapter};
use aegis::metrics::Metrics;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::worker::{Client, InMemoryRunQueue, RunQueue, SqliteRunQueue, WorkerConfig, WorkerPool};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{delta, field_name, schema};
use support::stores::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use DispatchRule::LastWrite;

fn retry() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(2)
        .with_initial_interval(Duration::from_millis(1))
        .with_jitter(false)
}

/// `flaky` fails once (transient); `slow` overruns its 20 ms run timeout
/// once; `lookup` is cached on `topic`; `ask` is a Paladin on a chain whose
/// primary (behind a breaker opening at the first failure) answers 503.
fn graph() -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("topic", LastWrite),
            ("x", LastWrite),
            ("answer", LastWrite),
        ]),
        EngineLimits::default(),
    );
    g.add_node(
        "flaky",
        NodeSpec::from_fn("flaky", |_, ctx| {
            let attempt = ctx.attempt();
            Box::pin(async move {
                if attempt == 1 {
                    return Err(StateNodeError::transient("503"));
                }
                Ok(delta(&[("x", json!(1))]).into())
            })
        }),
    )
    .add_node(
        "slow",
        NodeSpec::from_fn("slow", |_, ctx| {
            let attempt = ctx.attempt();
            Box::pin(async move {
                if attempt == 1 {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok(StateDelta::new().into())
            })
        }),
    )
    .add_node(
        "lookup",
        NodeSpec::from_fn("lookup", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    )
    .add_node(
        "ask",
        NodeSpec::paladin(
            Paladin::new("Asker").with_model("m"),
            InputMapping::new("{topic}"),
            field_name("answer"),
        ),
    )
    .add_edge(START, "flaky")
    .add_edge("flaky", "slow")
    .add_edge("slow", "lookup")
    .add_edge("lookup", "ask")
    .add_edge("ask", END)
    .set_aegis("flaky", Aegis::new().with_retry(retry()))
    .set_aegis(
        "slow",
        Aegis::new()
            .with_retry(retry())
            .with_timeout(TimeoutPolicy::run(Duration::from_millis(20))),
    )
    .set_aegis(
        "lookup",
        Aegis::new().with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Fields(vec![field_name("topic")]),
        )),
    );
    g
}

fn engine() -> WarEngine<InMemoryWaypointStore> {
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_error(LlmError::ProviderError {
            provider: "primary".into(),
            status: 503,
            message: "overloaded".into(),
            retry_after: None,
        });
    let primary = CircuitBreaker::new(primary).with_failure_threshold(1);
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_response("fine")
        .with_response("fine");
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap();
    WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain)
        .with_node_cache(InMemoryNodeCache::new())
}

fn counter(name: &'static str) -> WarGraph {
    let mut g = WarGraph::new(schema(&[("x", LastWrite)]), EngineLimits::default());
    g.add_node(
        name,
        NodeSpec::from_fn(name, |_, _| {
            Box::pin(async { Ok(delta(&[("x", json!(1))]).into()) })
        }),
    )
    .add_edge(START, name)
    .add_edge(name, END);
    g
}

fn pool(queue: &Arc<dyn RunQueue>, id: &str) -> WorkerPool {
    WorkerPool::new(queue.clone(), WarEngine::new)
        .with_config(
            WorkerConfig::default()
                .with_worker_id(id)
                .with_poll_interval(Duration::from_millis(10)),
        )
        .register("job", counter("step"))
        .unwrap()
}

async fn scrape(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: metrics\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_run_and_a_fleet_round_tells_what_happened() {
    let metrics = Metrics::install();
    let server = metrics.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();

    // The engine run, twice on the same topic: the second serves `lookup`
    // from the cache (and `ask` hops again: the breaker is open).
    let (engine, g) = (engine(), graph());
    for thread in ["t1", "t2"] {
        let outcome = engine
            .start(&g, thread, json!({"topic": "launch"}))
            .await
            .unwrap();
        assert!(outcome.is_completed(), "{outcome:?}");
    }

    // The fleet round: `job-1` is claimed by a worker that never comes
    // back (a 1 ms lease), then taken over; `job-2` is claimed normally.
    let dir = TempDir::new("metrics-fleet");
    let queue: Arc<dyn RunQueue> = Arc::new(SqliteRunQueue::open(dir.db()).await.unwrap());
    metrics.watch_queue(queue.clone());
    let client = Client::new(queue.clone());
    client.submit("job", "job-1", json!({})).await.unwrap();
    let ghost = pool(&queue, "ghost").info();
    let claimed = queue
        .claim(&ghost, 1, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    tokio::time::sleep(Duration::from_millis(5)).await;
    client.submit("job", "job-2", json!({})).await.unwrap();
    let stop = CancellationToken::new();
    let worker = tokio::spawn(pool(&queue, "w1").run(stop.clone()));
    for thread in ["job-1", "job-2"] {
        let status = client.wait(thread, Duration::from_secs(30)).await.unwrap();
        assert_eq!(status.state, aegis::worker::RunState::Completed);
    }
    stop.cancel();
    worker.await.unwrap().unwrap();

    let response = scrape(server.local_addr(), "/metrics").await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    let has = |line: &str| {
        assert!(
            body.lines().any(|l| l == line),
            "no `{line}` in the scrape:\n{body}"
        );
    };
    // The engine: 2 runs, each with a retry of flaky and slow; a timeout;
    // lookup missed once, hit once; two hops (the second past the open
    // breaker).
    // Two engine runs and the fleet's two: one process, one set of metrics.
    has(r#"aegis_runs_finished_total{outcome="Completed"} 4"#);
    has(r#"aegis_attempts_total{node="flaky",outcome="failed",transience="transient"} 2"#);
    has(r#"aegis_attempts_total{node="flaky",outcome="succeeded",transience="none"} 2"#);
    has(r#"aegis_attempt_timeouts_total{node="slow",kind="run"} 2"#);
    has(r#"aegis_retries_total{node="flaky"} 2"#);
    has(r#"aegis_cache_misses_total{node="lookup"} 1"#);
    has(r#"aegis_cache_hits_total{node="lookup"} 1"#);
    has(r#"aegis_fallback_hops_total{from="primary",to="backup"} 2"#);
    has(r#"aegis_circuit_breaker_state{provider="primary",state="open"} 1"#);
    has(r#"aegis_circuit_breaker_state{provider="primary",state="closed"} 0"#);
    // The fleet: this process's worker claimed both runs and completed
    // them; the queue records three claims, one of them taken over.
    has("aegis_worker_claims_total 2");
    has(r#"aegis_worker_releases_total{outcome="completed"} 2"#);
    has(r#"aegis_runs{state="completed"} 2"#);
    has(r#"aegis_runs{state="queued"} 0"#);
    has("aegis_queue_depth 0");
    // Nothing is queued: the oldest queued run's age reads 0.
    has("aegis_queue_oldest_queued_run_age_seconds 0.0");
    has("aegis_fleet_claims_total 3");
    has("aegis_fleet_takeovers_total 1");
    has("aegis_fleet_abandons_total 0");
    assert!(body.contains("# TYPE aegis_lease_renewal_lag_seconds histogram"));
    assert!(body.ends_with("# EOF\n"), "{body}");

    // A run queued (on a second watched queue) for at least 50 ms: the
    // next scrape reads its age.
    let waiting: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    metrics.watch_queue(waiting.clone());
    waiting.submit("job", "job-3", json!({})).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let response = scrape(server.local_addr(), "/metrics").await;
    let age: f64 = response
        .lines()
        .find_map(|l| l.strip_prefix("aegis_queue_oldest_queued_run_age_seconds "))
        .unwrap_or_else(|| panic!("no age in the scrape:\n{response}"))
        .parse()
        .unwrap();
    assert!(age >= 0.05, "{age}");
    assert!(
        response.lines().any(|l| l == "aegis_queue_depth 1"),
        "{response}"
    );

    let missing = scrape(server.local_addr(), "/elsewhere").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}
