//! Crash safety of the SQLite store: a process running a 50-superstep graph
//! is SIGKILLed at a random superstep, another resumes the thread, and the
//! result is the uninterrupted run's, with every superstep's delta applied
//! exactly once (a node may run twice: at-least-once execution).
//!
//! The child process is this test binary again, running
//! `crash_child_or_reference_run` with `AEGIS_CRASH_CHILD_DB` set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::stores;

use aegis::prelude::*;
use aegis::waypoint::{NodeStatus, SqliteWaypointStore, WaypointStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use stores::{Hook, counting_graph};

const SUPERSTEPS: u32 = 50;
const KILL_POINTS: usize = 20;
const THREAD: &str = "crash";
const CHILD_DB: &str = "AEGIS_CRASH_CHILD_DB";
const CHILD_EXECUTIONS: &str = "AEGIS_CRASH_CHILD_EXECUTIONS";
const MARK: &str = "aegis-crash: executing ";

/// A hook that notes every execution in `log` (one line per superstep
/// started, flushed before the node goes on) and announces it on stdout.
fn child_hook(log: &Path) -> Hook {
    let log = log.to_path_buf();
    Arc::new(move |step| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        writeln!(file, "{step}").unwrap();
        println!("{MARK}{step}");
        // Gives the parent's kill a node in flight to land on, not only a
        // commit; nothing is asserted about this duration.
        Box::pin(tokio::time::sleep(Duration::from_millis(1)))
    })
}

/// The reference run in a normal test run; the crashing run in a child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_or_reference_run() {
    if let (Some(db), Some(log)) = (
        std::env::var_os(CHILD_DB),
        std::env::var_os(CHILD_EXECUTIONS),
    ) {
        let store = Arc::new(SqliteWaypointStore::open(db).await.unwrap());
        let graph = counting_graph(SUPERSTEPS, child_hook(Path::new(&log)));
        let outcome = WarEngine::new(store)
            .start(&graph, THREAD, json!({}))
            .await
            .unwrap();
        assert!(outcome.is_completed());
        return;
    }
    let store = Arc::new(aegis::waypoint::InMemoryWaypointStore::new());
    let outcome = WarEngine::new(store)
        .start(
            &counting_graph(SUPERSTEPS, stores::no_hook()),
            THREAD,
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome.state().get("log"),
        Some(&json!((1..=SUPERSTEPS).collect::<Vec<_>>()))
    );
    assert_eq!(outcome.state().get("count"), Some(&json!(SUPERSTEPS)));
}

struct Crash {
    kill_at: u32,
    delay: Duration,
    killed: bool,
}

/// Runs the child until it announces superstep `kill_at`, waits `delay`,
/// then SIGKILLs it.
fn run_and_kill(dir: &stores::TempDir, kill_at: u32, delay: Duration) -> Crash {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_or_reference_run",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, dir.db())
        .env(CHILD_EXECUTIONS, dir.path().join("executions.log"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let target = format!("{MARK}{kill_at}");
    let mut killed = false;
    for line in BufReader::new(stdout).lines() {
        if line.unwrap() == target {
            let until = Instant::now() + delay;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            // `Child::kill` is SIGKILL on Unix: no destructor, no flush.
            killed = child.kill().is_ok();
            break;
        }
    }
    let status = child.wait().unwrap();
    Crash {
        kill_at,
        delay,
        killed: killed && !status.success(),
    }
}

#[test]
fn sigkill_at_twenty_random_supersteps_then_resume() {
    let seed: u64 = std::env::var("AEGIS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("crash test seed: {seed} (AEGIS_CRASH_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reference = runtime.block_on(async {
        let store = Arc::new(aegis::waypoint::InMemoryWaypointStore::new());
        WarEngine::new(store)
            .start(
                &counting_graph(SUPERSTEPS, stores::no_hook()),
                "ref",
                json!({}),
            )
            .await
            .unwrap()
    });

    let mut cut_short = 0;
    for point in 0..KILL_POINTS {
        let dir = stores::TempDir::new(&format!("crash-{point}"));
        let crash = run_and_kill(
            &dir,
            rng.random_range(1..=SUPERSTEPS),
            Duration::from_micros(rng.random_range(0..2_500)),
        );
        let child_executions = std::fs::read_to_string(dir.path().join("executions.log"))
            .unwrap_or_default()
            .lines()
            .count() as u32;

        cut_short += runtime.block_on(async {
            let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
            let stored_before = store.history(THREAD).await.unwrap().len();
            let resumed = Arc::new(AtomicU32::new(0));
            let counter = resumed.clone();
            let hook: Hook = Arc::new(move |_| {
                counter.fetch_add(1, Ordering::Relaxed);
                Box::pin(async {})
            });
            let outcome = WarEngine::new(store.clone())
                .resume(&counting_graph(SUPERSTEPS, hook), THREAD, None)
                .await
                .unwrap();
            let context = format!(
                "seed {seed}, point {point}: killed={} at superstep {} after {:?}, {stored_before} waypoints stored",
                crash.killed, crash.kill_at, crash.delay
            );
            assert!(outcome.is_completed(), "{context}: {outcome:?}");
            assert_eq!(outcome.state(), reference.state(), "{context}");

            // Exactly one closed waypoint per superstep, each with one
            // succeeded execution of the node ...
            let history = store.history(THREAD).await.unwrap();
            let applied: Vec<u32> = history
                .iter()
                .filter(|w| !w.interrupted && w.seq > 0)
                .flat_map(|w| {
                    w.records
                        .iter()
                        .filter(|r| r.status == NodeStatus::Succeeded)
                        .map(move |_| w.superstep)
                })
                .collect();
            assert_eq!(applied, (1..=SUPERSTEPS).collect::<Vec<_>>(), "{context}");
            // ... while the node itself ran at least once per superstep, and
            // at most once more: the superstep in flight at the kill.
            let executions = child_executions + resumed.load(Ordering::Relaxed);
            assert!(
                (SUPERSTEPS..=SUPERSTEPS + 1).contains(&executions),
                "{context}: {executions} executions"
            );
            println!(
                "{context}; the node ran {executions} times for {SUPERSTEPS} supersteps"
            );
            usize::from(stored_before <= SUPERSTEPS as usize)
        });
    }
    // A child that finished before its kill proves nothing; on a loaded
    // machine a few may, but most must die mid-run.
    assert!(
        cut_short >= KILL_POINTS / 2,
        "seed {seed}: only {cut_short} of {KILL_POINTS} children were killed mid-run"
    );
}
