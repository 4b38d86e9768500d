//! Effects exactly once on the worker fleet over the real PostgreSQL
//! server, with worker processes (this binary, re-executed with
//! `AEGIS_FLEET_WORKER`) SIGKILLed at random and, for every fourth charge,
//! right after the payment server made it and before it answered: between
//! the call and its record.
//!
//! Two local payment servers: one honours `Idempotency-Key`, one does not.
//! Every run charges once at each (`pay_graph` in `tests/payments`).
//! Checked, counting at the servers: exactly one charge per (thread,
//! effect) at both; every unknown outcome at the one that does not honour
//! keys was reconciled (it was looked up, none is left started); then a run
//! whose only charge hangs, its worker killed, asks a human with a parley
//! that carries the key, and completes with the answer, charged once.
//!
//! `cargo test --all-features --test effects_fleet` (a few seconds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fleet/mod.rs"]
mod fleet;
#[path = "payments/mod.rs"]
mod payments;

use aegis::graph::{EffectAnswer, EffectState};
use aegis::prelude::*;
use aegis::waypoint::WaypointStatus;
use aegis::worker::{Client, RunQueue, RunState, WorkerConfig, WorkerPool};
use fleet::{Fleet, SchemaGuard, WORKER_ENV, admin, connect, unique_schema};
use payments::{Behaviour, PaymentServer, ask_graph, pay_graph};
use rand::Rng;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RUNS: usize = 40;
const TTL_MS: u64 = 500;
const BOUND: Duration = Duration::from_secs(90);

fn main() {
    if std::env::var_os(WORKER_ENV).is_some() {
        worker_main();
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(charges_stay_exactly_once_through_kills());
    println!("effects_fleet: ok");
}

/// The servers' addresses, as the workers read them from the schema.
async fn servers(schema: &str) -> (SocketAddr, SocketAddr) {
    let row = admin()
        .await
        .query_one(
            &format!("SELECT honouring, plain FROM \"{schema}\".pay_servers"),
            &[],
        )
        .await
        .unwrap();
    let (a, b): (String, String) = (row.get(0), row.get(1));
    (a.parse().unwrap(), b.parse().unwrap())
}

fn worker_main() {
    let schema = std::env::var(WORKER_ENV).unwrap();
    let id = std::env::var("AEGIS_FLEET_ID").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let stop = aegis::worker::shutdown_signal().unwrap();
        let on_eof = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            on_eof.cancel();
        });
        let (honouring, plain) = servers(&schema).await;
        let queue = connect(&schema).await;
        let ttl = Duration::from_millis(TTL_MS);
        let pool = WorkerPool::new(queue, WarEngine::new)
            .with_config(
                WorkerConfig::default()
                    .with_worker_id(id)
                    .with_max_runs(16)
                    .with_lease_ttl(ttl)
                    .with_heartbeat_interval(ttl / 4)
                    .with_poll_interval(Duration::from_millis(50))
                    .with_shutdown_grace(Duration::from_secs(1)),
            )
            .register(
                "pay",
                pay_graph(honouring, plain, Duration::from_millis(20)),
            )
            .unwrap()
            .register("ask", ask_graph(plain))
            .unwrap();
        pool.run(stop).await.unwrap();
    });
}

/// SIGKILLs the worker holding `thread`'s lease (if it is still one of
/// ours) and starts another; whether it was found.
async fn kill_holder(fleet: &mut Fleet, client: &Client, thread: &str) -> bool {
    let holder = client
        .status(thread)
        .await
        .unwrap()
        .and_then(|s| s.worker_id);
    let Some(i) = holder.and_then(|h| fleet.workers.iter().position(|(w, _)| *w == h)) else {
        return false;
    };
    fleet.kill(i);
    fleet.spawn();
    true
}

async fn charges_stay_exactly_once_through_kills() {
    let schema = unique_schema("effects");
    let _drop_schema = SchemaGuard(schema.clone());
    let every_fourth = |honours_keys| Behaviour {
        honours_keys,
        delay: Duration::from_millis(5),
        hang_prefix: Some("human".to_string()),
        report_every: Some(4),
        report_delay: Duration::from_millis(400),
    };
    let (honouring, mut charged_a) = PaymentServer::start(every_fourth(true)).await;
    let (plain, mut charged_b) = PaymentServer::start(every_fourth(false)).await;
    let queue = connect(&schema).await;
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".pay_servers (honouring TEXT NOT NULL, plain TEXT NOT NULL);
             INSERT INTO \"{schema}\".pay_servers VALUES ('{}', '{}');",
            honouring.addr, plain.addr
        ))
        .await
        .unwrap();
    let client = Client::new(queue.clone() as Arc<dyn RunQueue>);
    let mut fleet = Fleet::new(&schema, "effects", TTL_MS, 20);
    for _ in 0..3 {
        fleet.spawn();
    }
    let threads: Vec<String> = (0..RUNS).map(|i| format!("run-{i:03}")).collect();
    for t in &threads {
        client
            .submit("pay", t, serde_json::json!({}))
            .await
            .unwrap();
    }

    let started = Instant::now();
    let mut rng = rand::rng();
    let mut last_kill = Instant::now();
    let (mut random_kills, mut window_kills) = (0, 0);
    loop {
        assert!(
            started.elapsed() < BOUND,
            "the runs did not finish within {BOUND:?}"
        );
        // A charge the server holds its answer to: its caller dies between
        // the call and the record.
        while let Ok((thread, _)) = charged_a.try_recv().or_else(|_| charged_b.try_recv()) {
            if kill_holder(&mut fleet, &client, &thread).await {
                window_kills += 1;
            }
        }
        if last_kill.elapsed() > Duration::from_millis(250) {
            let i = rng.random_range(0..fleet.workers.len());
            fleet.kill(i);
            fleet.spawn();
            random_kills += 1;
            last_kill = Instant::now();
        }
        let mut done = 0;
        for t in &threads {
            let s = client.status(t).await.unwrap().unwrap();
            assert_ne!(s.state, RunState::Failed, "{t} failed: {:?}", s.error);
            if s.state == RunState::Completed {
                done += 1;
            }
        }
        if done == threads.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        window_kills > 0,
        "no worker was killed between a call and its record"
    );

    for t in &threads {
        assert_eq!(
            honouring.charges(t, "charge_a"),
            1,
            "{t} at the honouring server"
        );
        assert_eq!(plain.charges(t, "charge_b"), 1, "{t}: a duplicate charge");
        let effects = client.effects(t).await.unwrap();
        assert_eq!(effects.len(), 2, "{t}: {effects:?}");
        for e in effects {
            assert_eq!(e.state, EffectState::Done, "{t}: {e:?}");
        }
        let state = client.latest(t).await.unwrap().unwrap().state;
        assert!(state.get("a").is_some() && state.get("b").is_some(), "{t}");
    }
    let (found, missing) = {
        let l = plain.ledger.lock().unwrap();
        (l.lookups_found, l.lookups_missing)
    };
    // Each kill in a window left an unknown outcome: reconciled by a lookup
    // at the server that does not honour keys, or retried under its key at
    // the one that does.
    assert!(found > 0, "no unknown outcome was reconciled");
    eprintln!(
        "effects_fleet: {RUNS} runs, {random_kills} random kills, {window_kills} kills between a call and its record, {found} unknown outcomes reconciled as charged, {missing} as not charged, {:?}",
        started.elapsed()
    );

    // Ask a human: the only charge of `human-0` never gets an answer; its
    // worker is killed; the next asks, with the key.
    client
        .submit("ask", "human-0", serde_json::json!({}))
        .await
        .unwrap();
    let (thread, _) = tokio::time::timeout(BOUND, charged_b.recv())
        .await
        .expect("the hanging charge was made")
        .unwrap();
    assert_eq!(thread, "human-0");
    assert!(kill_holder(&mut fleet, &client, "human-0").await);
    let waiting = client.wait("human-0", BOUND).await.unwrap();
    assert_eq!(waiting.state, RunState::AwaitingInput, "{waiting:?}");
    let latest = client.latest("human-0").await.unwrap().unwrap();
    let WaypointStatus::AwaitingInput { requests } = latest.status else {
        panic!("{:?}", latest.status)
    };
    let key = requests[0].1.payload["effect_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        requests[0].1.prompt.contains(&key),
        "{}",
        requests[0].1.prompt
    );
    let charge = plain.ledger.lock().unwrap().by_key.get(&key).cloned();
    let charge = charge.expect("the parley's key is the one the server got");
    client
        .answer(
            "human-0",
            EffectAnswer::done(&key, serde_json::json!({ "charge": charge })),
        )
        .await
        .unwrap();
    let finished = client
        .wait_until("human-0", BOUND, |s| s.is_final())
        .await
        .unwrap();
    assert_eq!(finished.state, RunState::Completed, "{finished:?}");
    assert_eq!(plain.charges("human-0", "charge_h"), 1);
    let state = client.latest("human-0").await.unwrap().unwrap().state;
    assert_eq!(
        state.get("h"),
        Some(&serde_json::json!({ "charge": charge }))
    );
    drop(fleet);
}
