//! Side effects exactly once through crashes: a worker fleet charges at a
//! local payment server while its workers are killed, some of them right
//! between a charge and its record.
//!
//! ```text
//! cargo run --example payments
//! ```
//!
//! Two payment servers run on 127.0.0.1: one honours `Idempotency-Key`,
//! one does not. Every run charges once at each, through
//! `ctx.effect(..)`: at the first with `OnUnknown::RetrySameKey` (the
//! server answers a repeated key with the first charge), at the second
//! with a reconcile function that looks the key up. Worker pools share one
//! SQLite queue in this process; a worker is killed (its task aborted: no
//! release, no heartbeat, no record) every 200 ms, and whenever a server
//! holds back its answer to a charge, the worker waiting for it is killed
//! before it can record it. The pools that are left take the runs over.
//! The charges are counted at the servers.

#[path = "../tests/payments/mod.rs"]
mod payments;

use aegis::prelude::*;
use aegis::worker::{Client, RunQueue, RunState, SqliteRunQueue, WorkerConfig, WorkerPool};
use payments::{Behaviour, PaymentServer, pay_graph};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const RUNS: usize = 24;
const WORKERS: usize = 3;
const LEASE_TTL: Duration = Duration::from_millis(300);
const BOUND: Duration = Duration::from_secs(45);

struct Fleet {
    queue: Arc<SqliteRunQueue>,
    servers: (SocketAddr, SocketAddr),
    workers: HashMap<String, JoinHandle<()>>,
    started: usize,
}

impl Fleet {
    fn spawn(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        self.started += 1;
        let id = format!("w{}", self.started);
        let (honouring, plain) = self.servers;
        let pool = WorkerPool::new(self.queue.clone(), WarEngine::new)
            .with_config(
                WorkerConfig::default()
                    .with_worker_id(id.clone())
                    .with_max_runs(8)
                    .with_lease_ttl(LEASE_TTL)
                    .with_heartbeat_interval(LEASE_TTL / 4)
                    .with_poll_interval(Duration::from_millis(20)),
            )
            .register(
                "pay",
                pay_graph(honouring, plain, Duration::from_millis(10)),
            )?;
        // Never cancelled: the worker runs until it is killed.
        let task = tokio::spawn(async move {
            if let Err(e) = pool.run(tokio_util::sync::CancellationToken::new()).await {
                eprintln!("a worker stopped: {e}");
            }
        });
        self.workers.insert(id, task);
        Ok(())
    }

    /// Kills worker `id` (if it is alive) and starts another.
    fn kill(&mut self, id: &str) -> Result<bool, Box<dyn std::error::Error>> {
        let Some(task) = self.workers.remove(id) else {
            return Ok(false);
        };
        task.abort();
        self.spawn()?;
        Ok(true)
    }

    fn kill_all(&mut self) {
        for (_, task) in self.workers.drain() {
            task.abort();
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let behaviour = |honours_keys| Behaviour {
        honours_keys,
        delay: Duration::from_millis(2),
        hang_prefix: None,
        report_every: Some(3),
        report_delay: Duration::from_millis(200),
    };
    let (honouring, mut held_a) = PaymentServer::start(behaviour(true)).await;
    let (plain, mut held_b) = PaymentServer::start(behaviour(false)).await;

    let path = std::env::temp_dir().join(format!("aegis-payments-{}.sqlite", std::process::id()));
    let queue = Arc::new(SqliteRunQueue::open(&path).await?);
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    let mut fleet = Fleet {
        queue: queue.clone(),
        servers: (honouring.addr, plain.addr),
        workers: HashMap::new(),
        started: 0,
    };
    for _ in 0..WORKERS {
        fleet.spawn()?;
    }
    let threads: Vec<String> = (0..RUNS).map(|i| format!("order-{i:02}")).collect();
    for t in &threads {
        client.submit("pay", t, serde_json::json!({})).await?;
    }

    let started = Instant::now();
    let (mut kills, mut between) = (0, 0);
    let mut last_kill = Instant::now();
    loop {
        if started.elapsed() > BOUND {
            fleet.kill_all();
            return Err(format!("the runs did not finish within {BOUND:?}").into());
        }
        while let Ok((thread, _)) = held_a.try_recv().or_else(|_| held_b.try_recv()) {
            let holder = client.status(&thread).await?.and_then(|s| s.worker_id);
            if let Some(id) = holder
                && fleet.kill(&id)?
            {
                between += 1;
            }
        }
        if last_kill.elapsed() > Duration::from_millis(200) {
            let victim = fleet.workers.keys().next().cloned();
            if let Some(id) = victim {
                fleet.kill(&id)?;
                kills += 1;
            }
            last_kill = Instant::now();
        }
        let mut done = 0;
        for t in &threads {
            match client.status(t).await?.map(|s| (s.state, s.error)) {
                Some((RunState::Completed, _)) => done += 1,
                Some((RunState::Failed, error)) => {
                    fleet.kill_all();
                    return Err(format!("{t} failed: {error:?}").into());
                }
                _ => {}
            }
        }
        if done == threads.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fleet.kill_all();
    drop(fleet);
    drop(queue);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }

    println!(
        "{RUNS} runs in {:.1?}: {kills} workers killed at random, {between} between a charge and its record",
        started.elapsed()
    );
    let (mut charges, mut duplicates) = (0, 0);
    for (server, effect, how) in [
        (
            &honouring,
            "charge_a",
            "honours Idempotency-Key; unknown outcomes retried with the same key",
        ),
        (
            &plain,
            "charge_b",
            "ignores Idempotency-Key; unknown outcomes reconciled by lookup",
        ),
    ] {
        let counts: Vec<u32> = threads.iter().map(|t| server.charges(t, effect)).collect();
        let total: u32 = counts.iter().sum();
        let dup: u32 = counts.iter().map(|c| c.saturating_sub(1)).sum();
        let missing = counts.iter().filter(|c| **c == 0).count();
        println!(
            "{effect} ({how}): {total} charges for {RUNS} runs, {dup} duplicate, {missing} missing"
        );
        charges += total;
        duplicates += dup;
    }
    let reconciled = {
        let l = plain
            .ledger
            .lock()
            .map_err(|_| "the server's ledger is poisoned")?;
        l.lookups_found + l.lookups_missing
    };
    println!(
        "charges: {charges}, duplicate charges: {duplicates}, unknown outcomes reconciled: {reconciled}"
    );
    if duplicates > 0 {
        return Err("a charge was made twice".into());
    }
    Ok(())
}
