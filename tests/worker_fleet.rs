//! The worker fleet with real processes on the real PostgreSQL server.
//!
//! Three worker processes (this binary, re-executed with
//! `AEGIS_FLEET_WORKER`) run 1,000 runs of a graph with retries, a muster
//! and (on every 50th run) a parley answered from this process, while a
//! random worker is SIGKILLed every 300 ms and restarted, and one worker is
//! SIGSTOPped past its lease and then resumed. Checked: every run
//! completes; every run's `count` (Sum) and `log` (Append) equal the
//! fault-free model, so each superstep was applied exactly once; along each
//! thread's waypoints the writing epoch never decreases (no two workers
//! advanced a thread at once: a stale epoch never wrote after a newer one);
//! the stopped worker wrote nothing after its leases were taken over, and
//! its attempts show as abandoned.
//!
//! Also: a worker process sent SIGTERM halts its run durably, releases its
//! lease (the thread is claimable at once, long before `lease_ttl`) and
//! exits 0.
//!
//! CI part: `cargo test --all-features --test worker_fleet` (about a minute).
//! Soak: `AEGIS_FLEET_SOAK_RUNS=20000 cargo test --all-features --test
//! worker_fleet` (same checks, more runs, a longer bound).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fleet/mod.rs"]
mod fleet;

use aegis::graph::ParleyResponse;
use aegis::waypoint::WaypointStatus;
use aegis::worker::{Client, GraphKey, RunQueue, RunState, WorkerInfo};
use fleet::*;
use rand::Rng;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    if std::env::var_os(WORKER_ENV).is_some() {
        worker_main();
        return;
    }
    let runs: usize = std::env::var("AEGIS_FLEET_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Generous: on a loaded 2-core machine 1,000 runs took 88 s (23 s idle).
    let bound = Duration::from_secs(300.max(60 + runs as u64 / 10));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(sigterm_releases_the_lease_and_exits_0());
    rt.block_on(fleet_survives_kills_and_pauses(runs, bound));
    println!("worker_fleet: ok ({runs} runs)");
}

async fn fleet_survives_kills_and_pauses(runs: usize, bound: Duration) {
    let schema = unique_schema("ci");
    let _drop_schema = SchemaGuard(schema.clone());
    let queue = connect(&schema).await;
    prepare_write_log(&schema).await;
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    let ttl_ms = 1000;
    let mut fleet = Fleet::new(&schema, "fleet", ttl_ms, 5);
    for _ in 0..3 {
        fleet.spawn();
    }
    let threads: Vec<(String, bool)> = (0..runs)
        .map(|i| (format!("run-{i:05}"), i % 50 == 0))
        .collect();
    for (thread, ask) in &threads {
        client
            .submit("fleet", thread, json!({ "ask": ask }))
            .await
            .unwrap();
    }
    let admin = admin().await;
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut last_kill = Instant::now();
    let mut kills = 0;
    // The pause: a worker holding a lease is stopped until its lease has
    // expired and another worker took the thread over, then resumed.
    let mut pause = Pause::NotYet;
    loop {
        assert!(
            started.elapsed() < bound,
            "the fleet did not finish within {bound:?}: {:?}",
            states(&admin, &schema).await
        );
        let counts = states(&admin, &schema).await;
        let done = counts.get("completed").copied().unwrap_or(0) == runs as i64;
        if done && matches!(pause, Pause::Resumed(_)) {
            break;
        }
        for thread in awaiting(&admin, &schema).await {
            // Answered from this process; a race with another answer
            // (none here) would be NotAwaitingInput.
            client
                .answer(&thread, ParleyResponse::new(json!("yes")))
                .await
                .unwrap();
        }
        pause = match pause {
            Pause::NotYet if started.elapsed() > Duration::from_secs(1) => {
                stop_a_leaseholder(&mut fleet, &admin, &schema).await
            }
            Pause::Stopped { id, since, threads }
                if since.elapsed() > Duration::from_millis(3 * ttl_ms)
                    && taken_over(&admin, &schema, &id, &threads).await =>
            {
                let i = fleet.workers.iter().position(|(w, _)| *w == id).unwrap();
                fleet.signal(i, "-CONT");
                Pause::Resumed(id)
            }
            other => other,
        };
        if last_kill.elapsed() > Duration::from_millis(300) {
            // Never the paused one (it must wake up to be checked).
            let paused = pause.worker();
            let candidates: Vec<usize> = (0..fleet.workers.len())
                .filter(|&i| Some(fleet.workers[i].0.as_str()) != paused)
                .collect();
            let i = candidates[rng.random_range(0..candidates.len())];
            fleet.kill(i);
            fleet.spawn();
            kills += 1;
            last_kill = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let Pause::Resumed(paused_id) = pause else {
        unreachable!("the loop ends only after the resume")
    };
    // The resumed worker notices its lost lease at its next renewal and
    // records the attempt as abandoned; wait for that, bounded.
    let abandoned = loop {
        let abandoned = abandoned_by(&admin, &schema, &paused_id).await;
        if abandoned >= 1 || started.elapsed() >= bound {
            break abandoned;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(fleet);

    // Exactly once: every run's state equals the fault-free model.
    for (thread, ask) in &threads {
        let latest = client.latest(thread).await.unwrap().unwrap();
        assert_eq!(latest.status, WaypointStatus::Completed, "{thread}");
        assert_eq!(
            latest.state.get("count"),
            Some(&json!(EXPECTED_COUNT)),
            "{thread}: count"
        );
        assert_eq!(
            latest.state.get("log"),
            Some(&Value::Array(expected_log(*ask))),
            "{thread}: log"
        );
    }
    // One writer at a time: along each thread's waypoints, the writing
    // epoch never goes back.
    let regressions = admin
        .query(
            &format!(
                "SELECT thread_id, seq, epoch, prev FROM (SELECT thread_id, seq, epoch, \
                 lag(epoch) OVER (PARTITION BY thread_id ORDER BY seq) AS prev \
                 FROM \"{schema}\".fleet_writes) w WHERE epoch < prev"
            ),
            &[],
        )
        .await
        .unwrap();
    assert!(
        regressions.is_empty(),
        "a stale epoch wrote after a newer one: {} rows",
        regressions.len()
    );
    let duplicates: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT thread_id, seq FROM \"{schema}\".fleet_writes \
                 GROUP BY thread_id, seq HAVING count(*) > 1) d"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(duplicates, 0, "a waypoint was written twice");
    // Fencing: the paused worker's leases were taken over; it abandoned
    // them and wrote nothing under them after the takeover.
    assert!(abandoned >= 1, "the paused worker abandoned no run");
    let late: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".fleet_writes w \
                 JOIN \"{schema}\".aegis_run_attempts a ON a.thread_id = w.thread_id AND a.epoch = w.epoch \
                 WHERE w.worker_id = $1 AND a.outcome = 'abandoned' AND EXISTS ( \
                   SELECT 1 FROM \"{schema}\".fleet_writes n WHERE n.thread_id = w.thread_id \
                   AND n.epoch > w.epoch AND n.seq <= w.seq)"
            ),
            &[&paused_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        late, 0,
        "the paused worker wrote after its lease was taken over"
    );
    let takeovers: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".aegis_run_attempts WHERE outcome IN ('expired', 'abandoned')"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!(
        "worker_fleet: {runs} runs in {:.1} s, {kills} kills, {takeovers} takeovers, {abandoned} abandoned by the paused worker",
        elapsed.as_secs_f64()
    );
    assert!(takeovers > 0, "no lease was ever taken over");
}

/// SIGTERM to a worker mid-run: the run halts at a waypoint, its lease is
/// released (another worker claims it at once, though the lease had 30 s
/// left) and the process exits 0, all within a few seconds.
async fn sigterm_releases_the_lease_and_exits_0() {
    let schema = unique_schema("sigterm");
    let _drop_schema = SchemaGuard(schema.clone());
    let queue = connect(&schema).await;
    prepare_write_log(&schema).await;
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    let ttl = Duration::from_secs(30);
    let work = Duration::from_millis(300);
    let mut fleet = Fleet::new(
        &schema,
        "chain",
        ttl.as_millis() as u64,
        work.as_millis() as u64,
    );
    let id = fleet.spawn();
    client.submit("chain", "term-1", json!({})).await.unwrap();
    let started = Instant::now();
    let bound = Duration::from_secs(15);
    // Mid-run: claimed by the worker, at least one superstep written.
    loop {
        assert!(started.elapsed() < bound, "the worker never got going");
        let status = client.status("term-1").await.unwrap().unwrap();
        let written = client.latest("term-1").await.unwrap().is_some();
        if status.state == RunState::Running && status.worker_id.as_deref() == Some(&id) && written
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fleet.signal(0, "-TERM");
    let exit = loop {
        assert!(
            started.elapsed() < bound,
            "the worker did not exit after SIGTERM"
        );
        if let Some(status) = fleet.workers[0].1.try_wait().unwrap() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "the worker exited with {exit}");
    let status = client.status("term-1").await.unwrap().unwrap();
    assert_eq!(status.state, RunState::Queued, "{status:?}");
    assert_eq!(status.worker_id, None, "{status:?}");
    let latest = client.latest("term-1").await.unwrap().unwrap();
    assert!(
        matches!(latest.status, WaypointStatus::Halted { .. }),
        "{:?}",
        latest.status
    );
    let attempts = client.attempts("term-1").await.unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect::<Vec<_>>(),
        ["halted"]
    );
    // Claimable at once by another worker, not after the 30 s lease.
    let probe = WorkerInfo {
        worker_id: "probe".into(),
        graphs: vec![GraphKey::of("chain", &chain_graph(10, work))],
    };
    queue.register(&probe, ttl).await.unwrap();
    let claims = queue.claim(&probe, 1, ttl).await.unwrap();
    assert_eq!(claims.len(), 1, "the halted run was not claimable");
    assert_eq!(claims[0].lease.thread_id, "term-1");
    assert!(claims[0].lease.epoch > 1);
    queue.deregister("probe").await.unwrap();
    println!(
        "worker_fleet: SIGTERM to exit 0 and a released lease in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Where the pause of one worker stands.
enum Pause {
    NotYet,
    /// SIGSTOPped while holding the leases of `threads`.
    Stopped {
        id: String,
        since: Instant,
        threads: Vec<String>,
    },
    Resumed(String),
}

impl Pause {
    fn worker(&self) -> Option<&str> {
        match self {
            Pause::NotYet => None,
            Pause::Stopped { id, .. } | Pause::Resumed(id) => Some(id),
        }
    }
}

/// SIGSTOPs a worker that holds at least one running lease, checked again
/// once it is stopped (it may have released its run in between; then it is
/// resumed and another try comes later).
async fn stop_a_leaseholder(
    fleet: &mut Fleet,
    admin: &tokio_postgres::Client,
    schema: &str,
) -> Pause {
    for i in 0..fleet.workers.len() {
        let id = fleet.workers[i].0.clone();
        if held_by(admin, schema, &id).await.is_empty() {
            continue;
        }
        fleet.signal(i, "-STOP");
        let threads = held_by(admin, schema, &id).await;
        if threads.is_empty() {
            fleet.signal(i, "-CONT");
            continue;
        }
        return Pause::Stopped {
            id,
            since: Instant::now(),
            threads,
        };
    }
    Pause::NotYet
}

/// The threads `worker` holds a running lease on.
async fn held_by(admin: &tokio_postgres::Client, schema: &str, worker: &str) -> Vec<String> {
    admin
        .query(
            &format!(
                "SELECT thread_id FROM \"{schema}\".aegis_runs \
                 WHERE state = 'running' AND worker_id = $1"
            ),
            &[&worker],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Whether every one of `threads` has moved on from `worker`'s lease.
async fn taken_over(
    admin: &tokio_postgres::Client,
    schema: &str,
    worker: &str,
    threads: &[String],
) -> bool {
    let still: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".aegis_runs \
                 WHERE thread_id = ANY($1) AND worker_id = $2"
            ),
            &[&threads, &worker],
        )
        .await
        .unwrap()
        .get(0);
    still == 0
}

async fn abandoned_by(admin: &tokio_postgres::Client, schema: &str, worker: &str) -> i64 {
    admin
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".aegis_run_attempts \
                 WHERE worker_id = $1 AND outcome = 'abandoned'"
            ),
            &[&worker],
        )
        .await
        .unwrap()
        .get(0)
}

async fn states(admin: &tokio_postgres::Client, schema: &str) -> HashMap<String, i64> {
    admin
        .query(
            &format!("SELECT state, count(*) FROM \"{schema}\".aegis_runs GROUP BY state"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn awaiting(admin: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    admin
        .query(
            &format!(
                "SELECT thread_id FROM \"{schema}\".aegis_runs WHERE state = 'awaiting_input'"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}
