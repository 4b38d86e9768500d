//! The worker fleet on the local PostgreSQL, with real worker processes
//! (this binary re-executed with `AEGIS_FLEET_WORKER`):
//!
//! - runs/s with 1, 2 and 4 worker processes on a 10-node graph (each
//!   worker runs up to 16 threads at once);
//! - submit → first superstep latency on an idle pool (p50/p99);
//! - takeover latency after a SIGKILL, lease TTL 1 s (p50/p99): from the
//!   kill to the thread's next claim by another worker.
//!
//! `cargo bench --features postgres --bench worker_pool`
//! (`AEGIS_BENCH_RUNS` runs per throughput point, default 400).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/fleet/mod.rs"]
mod fleet;

use aegis::worker::{Client, RunQueue, RunState};
use fleet::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    if std::env::var_os(WORKER_ENV).is_some() {
        worker_main();
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let runs: usize = std::env::var("AEGIS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        for workers in [1, 2, 4] {
            throughput(workers, runs).await;
        }
        first_superstep(50).await;
        takeover(12).await;
    });
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i.min(samples.len() - 1)]
}

async fn setup(
    name: &str,
) -> (
    String,
    SchemaGuard,
    Client,
    Arc<aegis::worker::PostgresRunQueue>,
) {
    let schema = unique_schema(name);
    let guard = SchemaGuard(schema.clone());
    let queue = connect(&schema).await;
    prepare_write_log(&schema).await;
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    (schema, guard, client, queue)
}

async fn wait_registered(admin: &tokio_postgres::Client, schema: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live: i64 = admin
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{schema}\".aegis_workers WHERE expires_at > now()"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if live >= n {
            return;
        }
        assert!(Instant::now() < deadline, "workers did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn throughput(workers: usize, runs: usize) {
    let (schema, _guard, client, _queue) = setup("tp").await;
    let admin = admin().await;
    let mut fleet = Fleet::new(&schema, "chain", 5000, 0);
    for _ in 0..workers {
        fleet.spawn();
    }
    wait_registered(&admin, &schema, workers as i64).await;
    let start = Instant::now();
    for i in 0..runs {
        client
            .submit("chain", &format!("t{i}"), json!({}))
            .await
            .unwrap();
    }
    loop {
        let done: i64 = admin
            .query_one(
                &format!("SELECT count(*) FROM \"{schema}\".aegis_runs WHERE state = 'completed'"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if done as usize == runs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = start.elapsed();
    println!(
        "throughput, {workers} worker process(es), 10-node graph: {runs} runs in {:.2} s = {:.0} runs/s",
        elapsed.as_secs_f64(),
        runs as f64 / elapsed.as_secs_f64()
    );
}

async fn first_superstep(samples: usize) {
    let (schema, _guard, client, _queue) = setup("lat").await;
    let admin = admin().await;
    let mut fleet = Fleet::new(&schema, "chain", 5000, 0);
    fleet.spawn();
    wait_registered(&admin, &schema, 1).await;
    let probe = admin
        .prepare(&format!(
            "SELECT 1 FROM \"{schema}\".aegis_waypoints WHERE thread_id = $1 AND seq >= 1 LIMIT 1"
        ))
        .await
        .unwrap();
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        let thread = format!("l{i}");
        let start = Instant::now();
        client.submit("chain", &thread, json!({})).await.unwrap();
        while admin.query_opt(&probe, &[&thread]).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        latencies.push(start.elapsed());
        client.wait(&thread, Duration::from_secs(10)).await.unwrap();
        // An idle pool between samples.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "submit -> first superstep on an idle pool: p50 {:.1} ms, p99 {:.1} ms ({samples} samples)",
        percentile(&mut latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&mut latencies, 0.99).as_secs_f64() * 1e3
    );
    drop(fleet);
}

async fn takeover(samples: usize) {
    let (schema, _guard, client, _queue) = setup("takeover").await;
    let admin = admin().await;
    // Each of 10 nodes sleeps 500 ms: the run outlives a kill.
    let mut fleet = Fleet::new(&schema, "chain", 1000, 500);
    fleet.spawn();
    fleet.spawn();
    wait_registered(&admin, &schema, 2).await;
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        let thread = format!("k{i}");
        client.submit("chain", &thread, json!({})).await.unwrap();
        let holder = loop {
            let s = client.status(&thread).await.unwrap().unwrap();
            if s.state == RunState::Running
                && let Some(w) = s.worker_id
            {
                break w;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Mid-run, with a heartbeat already sent.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let index = fleet
            .workers
            .iter()
            .position(|(w, _)| *w == holder)
            .unwrap();
        let killed = Instant::now();
        fleet.kill(index);
        loop {
            let s = client.status(&thread).await.unwrap().unwrap();
            if s.worker_id.is_some() && s.worker_id.as_deref() != Some(holder.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(killed.elapsed());
        fleet.spawn();
        wait_registered(&admin, &schema, 2).await;
        client.cancel(&thread).await.unwrap();
    }
    println!(
        "takeover after SIGKILL, lease TTL 1 s: p50 {:.0} ms, p99 {:.0} ms ({samples} samples)",
        percentile(&mut latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&mut latencies, 0.99).as_secs_f64() * 1e3
    );
}
