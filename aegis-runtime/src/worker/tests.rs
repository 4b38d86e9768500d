//! Every lease transition, on every queue: claim, renew, release (complete,
//! fail, parley, shutdown, cancel), expiry and takeover, and a write under
//! a stale epoch refused. Then the pool end to end on the in-memory queue
//! with tokio's paused clock.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::engine::{RunOutcome, WarEngine};
use crate::error::EngineError;
use crate::error::StoreError;
use crate::graph::EngineLimits;
use crate::graph::{Migration, NodeSpec, ParleyResponse, WarGraph};
use crate::id::{END, START};
use crate::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};

const TTL: Duration = Duration::from_secs(30);

/// One node adding 1 to `count`.
fn counter_graph() -> WarGraph {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("count").unwrap(),
        DispatchRule::Sum,
        Some(json!(0)),
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "inc",
        NodeSpec::from_fn("inc", |_, _| {
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("count", 1)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "inc")
    .add_edge("inc", END);
    g
}

/// `counter_graph` with another node: another fingerprint.
fn other_counter_graph() -> WarGraph {
    let mut g = counter_graph();
    g.add_node(
        "noop",
        NodeSpec::from_fn("noop", |_, _| {
            Box::pin(async move { Ok(StateDelta::new().into()) })
        }),
    )
    .add_edge("inc", "noop")
    .add_edge("noop", END);
    g
}

fn worker(id: &str, graph: &WarGraph) -> WorkerInfo {
    WorkerInfo {
        worker_id: id.to_string(),
        graphs: vec![GraphKey::of("counter", graph)],
    }
}

fn engine(queue: &Arc<dyn RunQueue>, lease: &Lease) -> WarEngine<LeasedStore> {
    WarEngine::new(LeasedStore::new(queue.clone(), lease.clone()))
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Memory,
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// Removes what a test created (a SQLite file, a PostgreSQL schema), also
/// when the test panics.
struct Cleanup(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

#[cfg(feature = "postgres")]
fn pg_url() -> String {
    std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("aegis_worker_{name}_{}_{nanos}", std::process::id())
}

async fn queue(kind: Kind, name: &str) -> (Arc<dyn RunQueue>, Cleanup) {
    let (q, cleanup, _) = queue_with_lift(kind, name).await;
    (q, cleanup)
}

/// Ends every unreadable thread's backoff on one queue.
type Lift = Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

fn lift_of<Q: Send + Sync + 'static>(
    q: &Arc<Q>,
    lift: impl Fn(Arc<Q>) -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static,
) -> Lift {
    let q = q.clone();
    Box::new(move || lift(q.clone()))
}

/// [`queue`], and a way to end its backoffs.
async fn queue_with_lift(kind: Kind, name: &str) -> (Arc<dyn RunQueue>, Cleanup, Lift) {
    let (q, cleanup, lift, _) = queue_with_hooks(kind, name).await;
    (q, cleanup, lift)
}

/// Moves every queued run's queued-since time [`BACKDATE`] into the past.
type Backdate = Lift;

/// How far a [`Backdate`] moves the queued runs' time.
const BACKDATE: Duration = Duration::from_secs(600);

/// [`queue_with_lift`], and a way to backdate its queued runs.
async fn queue_with_hooks(kind: Kind, name: &str) -> (Arc<dyn RunQueue>, Cleanup, Lift, Backdate) {
    match kind {
        Kind::Memory => {
            let q = Arc::new(InMemoryRunQueue::new());
            let lift = lift_of(&q, |q| Box::pin(async move { q.lift_backoffs().await }));
            let backdate = lift_of(&q, |q| {
                Box::pin(async move { q.backdate_queued(BACKDATE).await })
            });
            (q, Cleanup(None), lift, backdate)
        }
        #[cfg(feature = "sqlite")]
        Kind::Sqlite => {
            let path = std::env::temp_dir().join(format!("{}.sqlite", unique(name)));
            let q = SqliteRunQueue::open(&path).await.unwrap();
            let cleanup = Cleanup(Some(Box::new(move || {
                for suffix in ["", "-wal", "-shm"] {
                    let mut f = path.clone().into_os_string();
                    f.push(suffix);
                    let _ = std::fs::remove_file(f);
                }
            })));
            let q = Arc::new(q);
            let lift = lift_of(&q, |q| Box::pin(async move { q.lift_backoffs().await }));
            let backdate = lift_of(&q, |q| {
                Box::pin(async move { q.backdate_queued(BACKDATE).await })
            });
            (q, cleanup, lift, backdate)
        }
        #[cfg(feature = "postgres")]
        Kind::Postgres => {
            let schema = unique(name);
            let q = PostgresRunQueue::connect_with(
                &pg_url(),
                crate::waypoint::PostgresOptions::default()
                    .with_schema(&schema)
                    .with_pool_size(4),
            )
            .await
            .unwrap();
            let cleanup = Cleanup(Some(Box::new(move || {
                // Drop runs outside any runtime: a thread with its own.
                let _ = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(async move {
                        use std::str::FromStr;
                        let config = tokio_postgres::Config::from_str(&pg_url()).unwrap();
                        let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
                        tokio::spawn(conn);
                        client
                            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                            .await
                            .unwrap();
                    });
                })
                .join();
            })));
            let q = Arc::new(q);
            let lift = lift_of(&q, |q| Box::pin(async move { q.lift_backoffs().await }));
            let backdate = lift_of(&q, |q| {
                Box::pin(async move { q.backdate_queued(BACKDATE).await })
            });
            (q, cleanup, lift, backdate)
        }
    }
}

async fn claim_one(q: &Arc<dyn RunQueue>, w: &WorkerInfo, ttl: Duration) -> Claim {
    let mut claims = q.claim(w, 10, ttl).await.unwrap();
    assert_eq!(claims.len(), 1, "expected one claim, got {claims:?}");
    claims.remove(0)
}

async fn state(q: &Arc<dyn RunQueue>, thread: &str) -> RunState {
    q.status(thread).await.unwrap().unwrap().state
}

async fn outcomes(q: &Arc<dyn RunQueue>, thread: &str) -> Vec<(u64, String, String)> {
    q.attempts(thread)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.epoch, a.worker_id, a.outcome))
        .collect()
}

async fn claim_gives_one_worker_epoch_1_and_nobody_else_the_thread(kind: Kind) {
    let (q, _c) = queue(kind, "claim").await;
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    assert_eq!(
        q.submit("counter", "t1", json!({})).await.unwrap(),
        Submitted::New
    );
    let c = claim_one(&q, &w1, TTL).await;
    assert_eq!(c.lease.epoch, 1);
    assert_eq!(c.lease.worker_id, "w1");
    assert_eq!(c.graph_name, "counter");
    assert!(q.claim(&w2, 10, TTL).await.unwrap().is_empty());
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Running);
    assert_eq!(s.worker_id.as_deref(), Some("w1"));
    assert_eq!(s.fingerprint, Some(g.fingerprint()));
    assert_eq!(
        outcomes(&q, "t1").await,
        vec![(1, "w1".into(), "running".into())]
    );
}

async fn submit_is_idempotent_per_thread(kind: Kind) {
    let (q, _c) = queue(kind, "submit").await;
    assert_eq!(
        q.submit("counter", "t1", json!({})).await.unwrap(),
        Submitted::New
    );
    assert_eq!(
        q.submit("counter", "t1", json!({"x": 1})).await.unwrap(),
        Submitted::Existing
    );
    assert!(matches!(
        q.submit("other", "t1", json!({})).await,
        Err(WorkerError::GraphConflict { .. })
    ));
    assert!(matches!(
        q.submit("counter", "t2", json!([1])).await,
        Err(WorkerError::InvalidSubmission(_))
    ));
    assert!(matches!(
        q.submit("counter", "a>b", json!({})).await,
        Err(WorkerError::Store(StoreError::InvalidThreadId(_)))
    ));
    let g = counter_graph();
    let claims = q.claim(&worker("w", &g), 10, TTL).await.unwrap();
    assert_eq!(claims.len(), 1, "a twice-submitted thread is one run");
}

async fn renew_holds_the_lease_and_release_ends_it_per_outcome(kind: Kind) {
    let (q, _c) = queue(kind, "release").await;
    let g = counter_graph();
    let w = worker("w", &g);
    let cases = [
        (Release::Completed, RunState::Completed, "completed"),
        (
            Release::Failed {
                error: "boom".into(),
            },
            RunState::Failed,
            "failed",
        ),
        (
            Release::AwaitingInput,
            RunState::AwaitingInput,
            "awaiting_input",
        ),
        (Release::Halted, RunState::Queued, "halted"),
        (Release::Cancelled, RunState::Cancelled, "cancelled"),
    ];
    for (i, (release, expected, outcome)) in cases.into_iter().enumerate() {
        let thread = format!("t{i}");
        q.submit("counter", &thread, json!({})).await.unwrap();
        let c = claim_one(&q, &w, TTL).await;
        let renewal = q.renew(&c.lease, TTL).await.unwrap();
        assert!(!renewal.cancel_requested);
        let failed = matches!(release, Release::Failed { .. });
        q.release(&c.lease, release.clone()).await.unwrap();
        let s = q.status(&thread).await.unwrap().unwrap();
        assert_eq!(s.state, expected, "{release:?}");
        assert_eq!(s.worker_id, None);
        assert_eq!(s.error.as_deref(), failed.then_some("boom"));
        assert_eq!(outcomes(&q, &thread).await[0].2, outcome);
        // The lease is over: renewing or releasing it again is refused.
        assert!(matches!(
            q.renew(&c.lease, TTL).await,
            Err(WorkerError::LeaseLost { .. })
        ));
        assert!(matches!(
            q.release(&c.lease, Release::Completed).await,
            Err(WorkerError::LeaseLost { .. })
        ));
        if expected == RunState::Queued {
            // Released at shutdown: claimable again, with a larger epoch.
            let again = claim_one(&q, &w, TTL).await;
            assert_eq!(again.lease.epoch, c.lease.epoch + 1);
            q.release(&again.lease, Release::Completed).await.unwrap();
        }
    }
}

async fn an_expired_lease_is_taken_over_and_the_old_holder_writes_nothing(kind: Kind) {
    let (q, _c) = queue(kind, "takeover").await;
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    q.submit("counter", "t1", json!({})).await.unwrap();
    // A zero TTL: the lease is expired as soon as it is granted.
    let old = claim_one(&q, &w1, Duration::ZERO).await;
    let new = claim_one(&q, &w2, TTL).await;
    assert_eq!(new.lease.epoch, old.lease.epoch + 1);
    assert_eq!(
        outcomes(&q, "t1").await,
        vec![
            (1, "w1".into(), "expired".into()),
            (2, "w2".into(), "running".into())
        ]
    );
    assert!(matches!(
        q.renew(&old.lease, TTL).await,
        Err(WorkerError::LeaseLost { .. })
    ));
    // The old holder wakes up and runs: its first write is refused.
    let err = engine(&q, &old.lease)
        .start(&g, "t1", json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Store(StoreError::LeaseLost {
                epoch: 1,
                current: 2,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(q.waypoints().history("t1").await.unwrap().is_empty());
    q.abandon(&old.lease).await.unwrap();
    assert_eq!(outcomes(&q, "t1").await[0].2, "abandoned");
    // The new holder's writes go through.
    let outcome = engine(&q, &new.lease)
        .start(&g, "t1", json!({}))
        .await
        .unwrap();
    assert_eq!(outcome.state().get("count"), Some(&json!(1)));
    q.release(&new.lease, Release::Completed).await.unwrap();
    assert_eq!(state(&q, "t1").await, RunState::Completed);
}

async fn a_stale_epoch_cannot_write_after_a_takeover_mid_run(kind: Kind) {
    let (q, _c) = queue(kind, "midrun").await;
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    q.submit("counter", "t1", json!({})).await.unwrap();
    let old = claim_one(&q, &w1, Duration::ZERO).await;
    let old_store = LeasedStore::new(q.clone(), old.lease.clone());
    // The old holder wrote waypoint 0 while it held the lease...
    engine(&q, &old.lease)
        .start(&g, "t1", json!({}))
        .await
        .unwrap();
    let written = q.waypoints().history("t1").await.unwrap();
    assert_eq!(written.len(), 2);
    // ...then a takeover; the same next write under each epoch.
    let new = claim_one(&q, &w2, TTL).await;
    let mut next = written[1].clone();
    next.seq = 2;
    let refused = crate::waypoint::WaypointStore::put(&old_store, next.clone()).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost { .. })),
        "{refused:?}"
    );
    let new_store = LeasedStore::new(q.clone(), new.lease.clone());
    crate::waypoint::WaypointStore::put(&new_store, next)
        .await
        .unwrap();
    assert_eq!(q.waypoints().history("t1").await.unwrap().len(), 3);
}

/// The effect ledger a worker writes through is fenced like its
/// waypoints: after a takeover the old holder can neither start nor record
/// an effect, and the new holder finds the started one as an unknown
/// outcome.
async fn a_stale_epoch_cannot_start_or_record_an_effect(kind: Kind) {
    use crate::graph::{EffectStart, EffectState};
    use crate::waypoint::WaypointStore as _;
    let (q, _c) = queue(kind, "effects").await;
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    q.submit("counter", "t1", json!({})).await.unwrap();
    let old = claim_one(&q, &w1, Duration::ZERO).await;
    let old_ledger = LeasedStore::new(q.clone(), old.lease.clone())
        .effect_ledger()
        .unwrap();
    let start = EffectStart::new("k1", "t1", "inc", "charge");
    assert_eq!(old_ledger.begin(&start).await.unwrap(), None, "fresh");
    let again = old_ledger.begin(&start).await.unwrap().unwrap();
    assert_eq!((again.state, again.starts), (EffectState::Started, 1));

    let new = claim_one(&q, &w2, TTL).await;
    let lost = |r: Result<(), StoreError>| matches!(r, Err(StoreError::LeaseLost { .. }));
    assert!(lost(old_ledger.finish("k1", &json!({"charge": 9})).await));
    assert!(lost(old_ledger.restart("k1").await));
    let other = EffectStart::new("k2", "t1", "inc", "refund");
    assert!(matches!(
        old_ledger.begin(&other).await,
        Err(StoreError::LeaseLost { .. })
    ));

    let ledger = LeasedStore::new(q.clone(), new.lease.clone())
        .effect_ledger()
        .unwrap();
    let unknown = ledger.begin(&start).await.unwrap().unwrap();
    assert_eq!(unknown.state, EffectState::Started, "an unknown outcome");
    ledger.restart("k1").await.unwrap();
    ledger.finish("k1", &json!({"charge": 1})).await.unwrap();
    // A done effect keeps its first result.
    ledger.finish("k1", &json!({"charge": 2})).await.unwrap();
    let done = ledger.begin(&start).await.unwrap().unwrap();
    assert_eq!(done.state, EffectState::Done);
    assert_eq!(done.starts, 2);
    assert_eq!(done.result, Some(json!({"charge": 1})));
    // The store's own ledger reads the same table.
    let entries = q
        .waypoints()
        .effect_ledger()
        .unwrap()
        .entries("t1")
        .await
        .unwrap();
    assert_eq!(entries, vec![done]);
}

async fn a_parley_answer_requeues_the_thread_with_the_answer(kind: Kind) {
    let (q, _c) = queue(kind, "answer").await;
    let g = counter_graph();
    let w = worker("w", &g);
    q.submit("counter", "t1", json!({})).await.unwrap();
    let answer = ParleyResponse::new(json!("yes"));
    assert!(matches!(
        q.answer("t1", answer.clone()).await,
        Err(WorkerError::NotAwaitingInput { .. })
    ));
    assert!(matches!(
        q.answer("nope", answer.clone()).await,
        Err(WorkerError::UnknownThread { .. })
    ));
    let c = claim_one(&q, &w, TTL).await;
    assert_eq!(c.answer, None);
    q.release(&c.lease, Release::AwaitingInput).await.unwrap();
    // Waiting for input is not claimable.
    assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
    q.answer("t1", answer.clone()).await.unwrap();
    assert_eq!(state(&q, "t1").await, RunState::Queued);
    let c = claim_one(&q, &w, TTL).await;
    assert_eq!(c.answer, Some(answer));
    q.release(&c.lease, Release::Halted).await.unwrap();
    // Delivered once: the next claim does not get it again.
    let c = claim_one(&q, &w, TTL).await;
    assert_eq!(c.answer, None);
}

async fn cancel_ends_a_queued_run_and_asks_a_running_one(kind: Kind) {
    let (q, _c) = queue(kind, "cancel").await;
    let g = counter_graph();
    let w = worker("w", &g);
    q.submit("counter", "queued", json!({})).await.unwrap();
    q.cancel("queued").await.unwrap();
    assert_eq!(state(&q, "queued").await, RunState::Cancelled);
    assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
    q.submit("counter", "running", json!({})).await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    q.cancel("running").await.unwrap();
    assert_eq!(state(&q, "running").await, RunState::Running);
    assert!(q.renew(&c.lease, TTL).await.unwrap().cancel_requested);
    // The run halts; the halted release becomes a cancellation.
    q.release(&c.lease, Release::Halted).await.unwrap();
    assert_eq!(state(&q, "running").await, RunState::Cancelled);
    assert!(matches!(
        q.cancel("missing").await,
        Err(WorkerError::UnknownThread { .. })
    ));
    // A holder that died after a cancel request: no takeover, cancelled.
    q.submit("counter", "dead", json!({})).await.unwrap();
    let _dead = claim_one(&q, &w, Duration::ZERO).await;
    q.cancel("dead").await.unwrap();
    assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
    assert_eq!(state(&q, "dead").await, RunState::Cancelled);
}

async fn a_thread_waits_with_a_reason_for_a_worker_with_its_graph(kind: Kind) {
    let (q, _c) = queue(kind, "fingerprint").await;
    let g = counter_graph();
    let changed = other_counter_graph();
    let w_old = worker("old", &g);
    let w_new = worker("new", &changed);
    q.submit("counter", "t1", json!({})).await.unwrap();
    let reason = q.status("t1").await.unwrap().unwrap().waiting_reason;
    assert_eq!(
        reason.as_deref(),
        Some("no live worker runs graph `counter`")
    );
    // Bound to the first claimer's fingerprint.
    let c = claim_one(&q, &w_old, TTL).await;
    q.release(&c.lease, Release::Halted).await.unwrap();
    q.register(&w_new, TTL).await.unwrap();
    assert!(q.claim(&w_new, 10, TTL).await.unwrap().is_empty());
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Queued, "never failed");
    let reason = s.waiting_reason.unwrap();
    assert!(reason.contains(&g.fingerprint()), "{reason}");
    assert!(reason.contains(&changed.fingerprint()), "{reason}");
    q.register(&w_old, TTL).await.unwrap();
    assert_eq!(q.status("t1").await.unwrap().unwrap().waiting_reason, None);
    q.deregister("old").await.unwrap();
    assert!(
        q.status("t1")
            .await
            .unwrap()
            .unwrap()
            .waiting_reason
            .is_some()
    );
    let c = claim_one(&q, &w_old, TTL).await;
    assert_eq!(c.lease.epoch, 2);
}

async fn epochs_strictly_increase_over_many_claims(kind: Kind) {
    let (q, _c) = queue(kind, "epochs").await;
    let g = counter_graph();
    let ws: Vec<_> = (0..3).map(|i| worker(&format!("w{i}"), &g)).collect();
    q.submit("counter", "t1", json!({})).await.unwrap();
    let mut last = 0;
    for i in 0..9 {
        let c = claim_one(&q, &ws[i % 3], Duration::ZERO).await;
        assert!(c.lease.epoch > last);
        last = c.lease.epoch;
    }
    let epochs: Vec<u64> = outcomes(&q, "t1").await.iter().map(|a| a.0).collect();
    assert_eq!(epochs, (1..=9).collect::<Vec<_>>());
}

/// A thread `old` ran and halted, pinned to `old`'s fingerprint at epoch 1.
async fn pinned_thread(q: &Arc<dyn RunQueue>, old: &WorkerInfo, thread: &str, release: Release) {
    q.submit("counter", thread, json!({})).await.unwrap();
    let c = claim_one(q, old, TTL).await;
    q.release(&c.lease, release).await.unwrap();
}

async fn a_compatible_verdict_moves_the_thread_once_its_version_is_gone(kind: Kind) {
    let (q, _c) = queue(kind, "verdict").await;
    let (g, changed) = (counter_graph(), other_counter_graph());
    let (w_old, w_new) = (worker("old", &g), worker("new", &changed));
    pinned_thread(&q, &w_old, "t1", Release::Halted).await;
    q.register(&w_old, TTL).await.unwrap();
    q.register(&w_new, TTL).await.unwrap();

    // Handed out once to be judged, by its graph of another fingerprint.
    let unjudged = q.unjudged(&w_new, 10).await.unwrap();
    assert_eq!(
        unjudged,
        [PinnedRun::new(
            "t1",
            "counter",
            RunState::Queued,
            1,
            g.fingerprint()
        )]
    );
    assert!(q.unjudged(&w_old, 10).await.unwrap().is_empty(), "its own");
    let key = &w_new.graphs[0];
    q.record_verdict(&Verdict::compatible(&unjudged[0], key, Some("m1".into())))
        .await
        .unwrap();
    assert!(
        q.unjudged(&w_new, 10).await.unwrap().is_empty(),
        "judged once"
    );

    // While a worker of its own version is live, that worker takes it.
    assert!(q.claim(&w_new, 10, TTL).await.unwrap().is_empty());
    assert_eq!(q.status("t1").await.unwrap().unwrap().waiting_reason, None);
    assert!(q.pinned(None, 10).await.unwrap().is_empty());
    let listed = q.pinned(Some(&g.fingerprint()), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].verdicts[0].compatible, "{listed:?}");

    // Once it is gone, the judged-compatible graph does, and the move is
    // recorded.
    q.deregister("old").await.unwrap();
    assert_eq!(q.status("t1").await.unwrap().unwrap().waiting_reason, None);
    let c = claim_one(&q, &w_new, TTL).await;
    assert_eq!(c.lease.epoch, 2);
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!(s.fingerprint, Some(changed.fingerprint()));
    assert_eq!(s.previous_fingerprint, Some(g.fingerprint()));
    assert_eq!(s.migration.as_deref(), Some("m1"));
    assert_eq!(outcomes(&q, "t1").await.len(), 2, "no other claim");
}

async fn an_incompatible_verdict_pins_the_thread_with_its_reason(kind: Kind) {
    let (q, _c) = queue(kind, "pinned").await;
    let (g, changed) = (counter_graph(), other_counter_graph());
    let (w_old, w_new) = (worker("old", &g), worker("new", &changed));
    // Parked first: a queued thread would be claimed with the next one.
    pinned_thread(&q, &w_old, "t2", Release::AwaitingInput).await;
    pinned_thread(&q, &w_old, "t1", Release::Halted).await;
    q.register(&w_new, TTL).await.unwrap();

    let unjudged = q.unjudged(&w_new, 10).await.unwrap();
    let threads: Vec<_> = unjudged
        .iter()
        .map(|r| (r.thread_id.as_str(), r.state))
        .collect();
    assert_eq!(
        threads,
        [("t2", RunState::AwaitingInput), ("t1", RunState::Queued)],
        "a parked thread is judged before its answer arrives"
    );
    let reason = "the waiting thread will run node `inc`, which this graph no longer has";
    for run in &unjudged {
        q.record_verdict(&Verdict::incompatible(run, &w_new.graphs[0], reason))
            .await
            .unwrap();
    }
    // Pinned, with its reason, and never claimed or judged again: no churn.
    assert!(q.claim(&w_new, 10, TTL).await.unwrap().is_empty());
    assert!(q.unjudged(&w_new, 10).await.unwrap().is_empty());
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Queued);
    let waiting = s.waiting_reason.unwrap();
    assert!(waiting.contains(&g.fingerprint()), "{waiting}");
    assert!(waiting.contains(&changed.fingerprint()), "{waiting}");
    assert!(waiting.contains(reason), "{waiting}");
    assert_eq!(outcomes(&q, "t1").await.len(), 1);
    let pinned = q.pinned(None, 10).await.unwrap();
    assert_eq!(
        pinned
            .iter()
            .map(|r| r.thread_id.as_str())
            .collect::<Vec<_>>(),
        ["t2", "t1"]
    );
    assert_eq!(pinned[1].verdicts.len(), 1);
    assert_eq!(pinned[1].verdicts[0].reason.as_deref(), Some(reason));
    assert_eq!(pinned[1].verdicts[0].pinned_to, g.fingerprint());

    // A graph with other migrations has not judged it: it may.
    let mut migrating = worker("migrating", &changed);
    migrating.graphs[0] = migrating.graphs[0].clone().with_migrations("m:1");
    assert_eq!(q.unjudged(&migrating, 10).await.unwrap().len(), 2);

    // The old version takes it back; a verdict of an earlier epoch is
    // stale, so the thread is judged again.
    q.register(&w_old, TTL).await.unwrap();
    let c = claim_one(&q, &w_old, TTL).await;
    assert_eq!(c.lease.thread_id, "t1");
    q.release(&c.lease, Release::Halted).await.unwrap();
    let again = q.unjudged(&w_new, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].thread_id.as_str(), again[0].epoch), ("t1", 2));
    // A finished run is no longer pinned.
    let c = claim_one(&q, &w_old, TTL).await;
    q.release(&c.lease, Release::Completed).await.unwrap();
    assert_eq!(
        q.pinned(Some(&g.fingerprint()), 10).await.unwrap().len(),
        1,
        "only t2"
    );
}

async fn an_unreadable_thread_backs_off_then_is_quarantined_until_requeued(kind: Kind) {
    let (q, _c, lift) = queue_with_lift(kind, "poison").await;
    let g = counter_graph();
    let w = worker("w", &g);
    q.submit("counter", "t1", json!({})).await.unwrap();
    let fault = RunFault::UnreadableWaypoint {
        message: "waypoint #0 is unreadable".into(),
    };
    for round in 1..=MAX_UNREADABLE_CLAIMS {
        let c = claim_one(&q, &w, TTL).await;
        assert_eq!(c.lease.epoch, u64::from(round));
        q.release(&c.lease, Release::Poisoned(fault.clone()))
            .await
            .unwrap();
        let s = q.status("t1").await.unwrap().unwrap();
        assert_eq!(s.fault.as_ref(), Some(&fault));
        assert!(
            s.error.as_deref().is_some_and(|e| e.contains("unreadable")),
            "{s:?}"
        );
        if round < MAX_UNREADABLE_CLAIMS {
            assert_eq!(s.state, RunState::Queued);
            // Held back by its backoff: no claim at once.
            assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
            lift().await;
        } else {
            assert_eq!(s.state, RunState::Quarantined);
        }
    }
    // Quarantined: never claimed, listed, and `wait` returns.
    lift().await;
    assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
    let attempts = outcomes(&q, "t1").await;
    assert_eq!(
        attempts.len(),
        MAX_UNREADABLE_CLAIMS as usize,
        "bounded claims"
    );
    assert!(attempts.iter().all(|a| a.2 == "unreadable"), "{attempts:?}");
    let listed = q.quarantined(10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].thread_id.as_str(), listed[0].fault.as_ref()),
        ("t1", Some(&fault))
    );
    let client = Client::new(q.clone());
    let s = client.wait("t1", Duration::from_secs(5)).await.unwrap();
    assert_eq!(s.state, RunState::Quarantined);

    // After repair, an operator requeues it; a good claim clears the fault.
    client.requeue("t1").await.unwrap();
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!((s.state, s.fault), (RunState::Queued, None));
    let c = claim_one(&q, &w, TTL).await;
    q.release(&c.lease, Release::Completed).await.unwrap();
    assert_eq!(q.status("t1").await.unwrap().unwrap().fault, None);
    assert!(q.quarantined(10).await.unwrap().is_empty());
    assert!(matches!(
        client.requeue("t1").await,
        Err(WorkerError::NotQuarantined { .. })
    ));
    assert!(matches!(
        client.requeue("nobody").await,
        Err(WorkerError::UnknownThread { .. })
    ));

    // One claim that reads the thread ends a run of unreadable claims.
    q.submit("counter", "t2", json!({})).await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    q.release(&c.lease, Release::Poisoned(fault.clone()))
        .await
        .unwrap();
    lift().await;
    let c = claim_one(&q, &w, TTL).await;
    q.release(&c.lease, Release::Halted).await.unwrap();
    assert_eq!(q.status("t2").await.unwrap().unwrap().fault, None);
}

async fn an_unreadable_input_fails_the_run_at_once(kind: Kind) {
    let (q, _c) = queue(kind, "poison_input").await;
    let w = worker("w", &counter_graph());
    q.submit("counter", "t1", json!({})).await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    let fault = RunFault::UnreadableInput {
        message: "expected value at line 1 column 13".into(),
    };
    q.release(&c.lease, Release::Poisoned(fault.clone()))
        .await
        .unwrap();
    let s = q.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Failed);
    assert_eq!(s.fault, Some(fault));
    assert!(s.error.unwrap().contains("stored input is unreadable"));
    assert_eq!(outcomes(&q, "t1").await.len(), 1);
}

async fn an_unreadable_answer_is_kept_and_requeue_asks_again(kind: Kind) {
    let (q, _c, lift) = queue_with_lift(kind, "poison_answer").await;
    let w = worker("w", &counter_graph());
    q.submit("counter", "t1", json!({})).await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    q.release(&c.lease, Release::AwaitingInput).await.unwrap();
    q.answer("t1", ParleyResponse::new(json!("yes")))
        .await
        .unwrap();
    let fault = RunFault::UnreadableAnswer {
        message: "missing field `value`".into(),
    };
    for _ in 0..MAX_UNREADABLE_CLAIMS {
        let c = claim_one(&q, &w, TTL).await;
        // The answer is still there for every claim.
        assert!(c.answer.is_some());
        q.release(&c.lease, Release::Poisoned(fault.clone()))
            .await
            .unwrap();
        lift().await;
    }
    assert_eq!(state(&q, "t1").await, RunState::Quarantined);
    // Requeued, it waits for a new answer instead of the unreadable one.
    q.requeue("t1").await.unwrap();
    assert_eq!(state(&q, "t1").await, RunState::AwaitingInput);
    q.answer("t1", ParleyResponse::new(json!("again")))
        .await
        .unwrap();
    let c = claim_one(&q, &w, TTL).await;
    assert_eq!(c.answer.map(|a| a.value), Some(json!("again")));
}

async fn runs_lists_the_latest_first_filtered_by_state_and_graph(kind: Kind) {
    let (q, _c) = queue(kind, "runs").await;
    let w = worker("w", &counter_graph());
    for t in ["a", "b", "c"] {
        q.submit("counter", t, json!({})).await.unwrap();
    }
    q.submit("other", "d", json!({})).await.unwrap();
    let c = q.claim(&w, 1, TTL).await.unwrap().remove(0);
    assert_eq!(c.lease.thread_id, "a");
    q.release(&c.lease, Release::Completed).await.unwrap();
    let ids = |v: Vec<RunStatus>| v.into_iter().map(|s| s.thread_id).collect::<Vec<_>>();
    assert_eq!(
        ids(q.runs(None, None, 10).await.unwrap()),
        ["d", "c", "b", "a"]
    );
    assert_eq!(ids(q.runs(None, None, 2).await.unwrap()), ["d", "c"]);
    assert_eq!(
        ids(q
            .runs(Some(RunState::Queued), Some("counter"), 10)
            .await
            .unwrap()),
        ["c", "b"]
    );
    assert_eq!(
        ids(q.runs(Some(RunState::Completed), None, 10).await.unwrap()),
        ["a"]
    );
    assert_eq!(ids(q.runs(None, Some("other"), 10).await.unwrap()), ["d"]);
    // Statuses as `status` reports them, waiting reasons included.
    let d = q.runs(None, Some("other"), 1).await.unwrap().remove(0);
    assert_eq!(Some(d), q.status("d").await.unwrap());
}

async fn retry_now_ends_an_unreadable_threads_backoff(kind: Kind) {
    let (q, _c) = queue(kind, "retry_now").await;
    let w = worker("w", &counter_graph());
    q.submit("counter", "t1", json!({})).await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    let fault = RunFault::UnreadableWaypoint {
        message: "bad row".into(),
    };
    q.release(&c.lease, Release::Poisoned(fault)).await.unwrap();
    // Held back by its backoff...
    assert!(q.claim(&w, 10, TTL).await.unwrap().is_empty());
    // ...until an operator retries it now.
    Client::new(q.clone()).retry_now("t1").await.unwrap();
    let c = claim_one(&q, &w, TTL).await;
    assert_eq!((c.lease.thread_id.as_str(), c.lease.epoch), ("t1", 2));
    // A run with no backoff is left as it is; an unknown one is an error.
    q.retry_now("t1").await.unwrap();
    assert_eq!(state(&q, "t1").await, RunState::Running);
    assert!(matches!(
        q.retry_now("nobody").await,
        Err(WorkerError::UnknownThread { .. })
    ));
}

/// What metrics read at each scrape: runs by state, and every claim with
/// the takeovers and abandons among them.
async fn stats_count_runs_by_state_and_claims_by_how_they_ended(kind: Kind) {
    let (q, _c) = queue(kind, "stats").await;
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    // t1: claimed under a lease that is expired at once, taken over, the
    // old holder abandons; t2 claimed and completed; t3 stays queued.
    q.submit("counter", "t1", json!({})).await.unwrap();
    let old = claim_one(&q, &w1, Duration::ZERO).await;
    let new = claim_one(&q, &w2, TTL).await;
    assert_eq!(new.lease.thread_id, "t1");
    q.abandon(&old.lease).await.unwrap();
    q.submit("counter", "t2", json!({})).await.unwrap();
    let done = claim_one(&q, &w2, TTL).await;
    q.release(&done.lease, Release::Completed).await.unwrap();
    q.submit("counter", "t3", json!({})).await.unwrap();
    let stats = q
        .stats()
        .await
        .unwrap()
        .expect("every queue of ours can tell");
    assert_eq!(
        (
            stats.runs_in(RunState::Queued),
            stats.runs_in(RunState::Running),
            stats.runs_in(RunState::Completed),
            stats.runs_in(RunState::Failed),
        ),
        (1, 1, 1, 0)
    );
    // The expired claim was abandoned later: its last word is `abandoned`.
    assert_eq!((stats.claims, stats.takeovers, stats.abandons), (3, 0, 1));
    let (q, _c) = queue(kind, "stats_takeover").await;
    q.submit("counter", "t1", json!({})).await.unwrap();
    claim_one(&q, &w1, Duration::ZERO).await;
    claim_one(&q, &w2, TTL).await;
    let stats = q.stats().await.unwrap().unwrap();
    assert_eq!((stats.claims, stats.takeovers, stats.abandons), (2, 1, 0));
}

/// The oldest queued run's age: none with nothing queued; the oldest
/// run's, not the latest's; and a claim takes its run out of the count.
async fn stats_tell_how_long_the_oldest_queued_run_has_waited(kind: Kind) {
    let (q, _c, lift, backdate) = queue_with_hooks(kind, "stats_age").await;
    let g = counter_graph();
    let w = worker("w1", &g);
    let age = |stats: Option<QueueStats>| {
        stats
            .expect("every queue of ours can tell")
            .oldest_queued_age
    };
    assert_eq!(age(q.stats().await.unwrap()), None, "nothing queued");
    q.submit("counter", "t1", json!({})).await.unwrap();
    let fresh = age(q.stats().await.unwrap()).expect("t1 is queued");
    assert!(fresh < BACKDATE, "{fresh:?}");
    backdate().await;
    q.submit("counter", "t2", json!({})).await.unwrap();
    let oldest = age(q.stats().await.unwrap()).expect("t1 and t2 are queued");
    assert!(
        oldest >= BACKDATE && oldest < 2 * BACKDATE,
        "t1's age: {oldest:?}"
    );
    // The claim takes t1 (oldest first): t2 is the oldest left, fresh.
    let mut claims = q.claim(&w, 1, TTL).await.unwrap();
    assert_eq!(claims.len(), 1);
    let c = claims.remove(0);
    assert_eq!(c.lease.thread_id, "t1");
    let left = age(q.stats().await.unwrap()).expect("t2 is queued");
    assert!(left < BACKDATE, "t2's age: {left:?}");
    // Released back to the queue, t1 is queued since the release.
    backdate().await;
    q.release(&c.lease, Release::Halted).await.unwrap();
    let oldest = age(q.stats().await.unwrap()).expect("t1 and t2 are queued");
    assert!(
        oldest >= BACKDATE && oldest < 2 * BACKDATE,
        "t2's age: {oldest:?}"
    );
    let mut claims = q.claim(&w, 10, TTL).await.unwrap();
    assert_eq!(claims.len(), 2);
    assert_eq!(age(q.stats().await.unwrap()), None, "nothing queued");
    // Requeued from quarantine, a run is queued since the requeue (not
    // since it was last queued before its quarantine).
    let fault = RunFault::UnreadableWaypoint {
        message: "waypoint #0 is unreadable".into(),
    };
    let mut c = claims.remove(0);
    for round in 1..=MAX_UNREADABLE_CLAIMS {
        q.release(&c.lease, Release::Poisoned(fault.clone()))
            .await
            .unwrap();
        if round < MAX_UNREADABLE_CLAIMS {
            backdate().await;
            lift().await;
            c = claim_one(&q, &w, TTL).await;
        }
    }
    assert_eq!(state(&q, &c.lease.thread_id).await, RunState::Quarantined);
    assert_eq!(age(q.stats().await.unwrap()), None, "nothing queued");
    q.requeue(&c.lease.thread_id).await.unwrap();
    let requeued = age(q.stats().await.unwrap()).expect("requeued");
    assert!(requeued < BACKDATE, "{requeued:?}");
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Memory).await })*
        }
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Sqlite).await })*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Postgres).await })*
        }
    };
}

contract!(
    claim_gives_one_worker_epoch_1_and_nobody_else_the_thread,
    submit_is_idempotent_per_thread,
    renew_holds_the_lease_and_release_ends_it_per_outcome,
    an_expired_lease_is_taken_over_and_the_old_holder_writes_nothing,
    a_stale_epoch_cannot_write_after_a_takeover_mid_run,
    a_stale_epoch_cannot_start_or_record_an_effect,
    a_parley_answer_requeues_the_thread_with_the_answer,
    cancel_ends_a_queued_run_and_asks_a_running_one,
    a_thread_waits_with_a_reason_for_a_worker_with_its_graph,
    epochs_strictly_increase_over_many_claims,
    a_compatible_verdict_moves_the_thread_once_its_version_is_gone,
    an_incompatible_verdict_pins_the_thread_with_its_reason,
    an_unreadable_thread_backs_off_then_is_quarantined_until_requeued,
    an_unreadable_input_fails_the_run_at_once,
    an_unreadable_answer_is_kept_and_requeue_asks_again,
    runs_lists_the_latest_first_filtered_by_state_and_graph,
    retry_now_ends_an_unreadable_threads_backoff,
    stats_count_runs_by_state_and_claims_by_how_they_ended,
    stats_tell_how_long_the_oldest_queued_run_has_waited,
);

#[test]
fn a_claim_names_an_unreadable_input_or_answer() {
    let lease = Lease {
        thread_id: "t".into(),
        epoch: 1,
        worker_id: "w".into(),
    };
    let c = Claim::from_stored(lease.clone(), "g".into(), r#"{"flaky": tru"#, None);
    assert!(
        matches!(&c.fault, Some(RunFault::UnreadableInput { message }) if message.contains("line 1")),
        "{c:?}"
    );
    assert_eq!(c.input, serde_json::Value::Null, "never run on defaults");
    let c = Claim::from_stored(lease.clone(), "g".into(), "[1]", None);
    assert!(
        matches!(&c.fault, Some(RunFault::UnreadableInput { message }) if message.contains("an array")),
        "{c:?}"
    );
    let c = Claim::from_stored(lease.clone(), "g".into(), "{}", Some("{\"nope\""));
    assert!(
        matches!(c.fault, Some(RunFault::UnreadableAnswer { .. })),
        "{c:?}"
    );
    assert!(c.answer.is_none());
    let c = Claim::from_stored(
        lease,
        "g".into(),
        r#"{"a": 1}"#,
        Some(r#"{"value": "yes"}"#),
    );
    assert_eq!(c.fault, None);
    assert_eq!(c.input, json!({"a": 1}));
}

#[test]
fn the_unreadable_backoff_is_1_then_5_seconds_and_never_overflows() {
    assert_eq!(unreadable_backoff(1), Duration::from_secs(1));
    assert_eq!(unreadable_backoff(2), Duration::from_secs(5));
    assert_eq!(unreadable_backoff(u32::MAX), Duration::from_secs(3600));
    assert_eq!(unreadable_backoff(0), Duration::from_secs(1));
}

// ---- The in-memory queue on tokio's paused clock -------------------------

#[tokio::test(start_paused = true)]
async fn a_lease_expires_exactly_at_its_ttl_unless_renewed() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let g = counter_graph();
    let (w1, w2) = (worker("w1", &g), worker("w2", &g));
    q.submit("counter", "t1", json!({})).await.unwrap();
    let c = claim_one(&q, &w1, Duration::from_secs(10)).await;
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(q.claim(&w2, 10, TTL).await.unwrap().is_empty());
    q.renew(&c.lease, Duration::from_secs(10)).await.unwrap();
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(q.claim(&w2, 10, TTL).await.unwrap().is_empty(), "renewed");
    tokio::time::advance(Duration::from_secs(1)).await;
    let taken = claim_one(&q, &w2, TTL).await;
    assert_eq!(taken.lease.epoch, 2);
}

/// A run is queued since it last entered the queue: submitted, released
/// back to it, or answered.
#[tokio::test(start_paused = true)]
async fn the_oldest_queued_age_counts_from_the_latest_queuing() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let g = counter_graph();
    let w = worker("w1", &g);
    let age = |stats: Option<QueueStats>| stats.unwrap().oldest_queued_age;
    let secs = Duration::from_secs;
    q.submit("counter", "t1", json!({})).await.unwrap();
    tokio::time::advance(secs(30)).await;
    q.submit("counter", "t2", json!({})).await.unwrap();
    tokio::time::advance(secs(10)).await;
    assert_eq!(age(q.stats().await.unwrap()), Some(secs(40)));
    let t1 = q.claim(&w, 1, TTL).await.unwrap().remove(0);
    assert_eq!(t1.lease.thread_id, "t1");
    assert_eq!(age(q.stats().await.unwrap()), Some(secs(10)), "t2's");
    q.release(&t1.lease, Release::AwaitingInput).await.unwrap();
    tokio::time::advance(secs(5)).await;
    assert_eq!(
        age(q.stats().await.unwrap()),
        Some(secs(15)),
        "waiting for input is not queued"
    );
    claim_one(&q, &w, TTL).await;
    assert_eq!(age(q.stats().await.unwrap()), None);
    q.answer("t1", ParleyResponse::new(json!("yes")))
        .await
        .unwrap();
    tokio::time::advance(secs(7)).await;
    assert_eq!(
        age(q.stats().await.unwrap()),
        Some(secs(7)),
        "queued since the answer"
    );
}

/// A SQLite file whose runs table 0.2.0 created (no `queued_ms`) gains the
/// column on open; the runs queued then count as queued since the open.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_queue_of_0_2_0_gains_the_queued_time_on_open() {
    let path = std::env::temp_dir().join(format!("{}.sqlite", unique("queued_ms_upgrade")));
    let _cleanup = Cleanup(Some(Box::new({
        let path = path.clone();
        move || {
            for suffix in ["", "-wal", "-shm"] {
                let mut f = path.clone().into_os_string();
                f.push(suffix);
                let _ = std::fs::remove_file(f);
            }
        }
    })));
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE aegis_runs (
                thread_id TEXT PRIMARY KEY,
                graph_name TEXT NOT NULL,
                input TEXT NOT NULL,
                state TEXT NOT NULL,
                epoch INTEGER NOT NULL DEFAULT 0,
                worker_id TEXT,
                expires_ms INTEGER,
                fingerprint TEXT,
                answer TEXT,
                error TEXT,
                cancel_requested INTEGER NOT NULL DEFAULT 0
            );
            INSERT INTO aegis_runs (thread_id, graph_name, input, state)
                VALUES ('old', 'counter', '{}', 'queued');",
        )
        .unwrap();
    }
    let q: Arc<dyn RunQueue> = Arc::new(SqliteRunQueue::open(&path).await.unwrap());
    let stats = q.stats().await.unwrap().unwrap();
    assert_eq!(stats.runs_in(RunState::Queued), 1);
    let age = stats.oldest_queued_age.expect("queued since the open");
    assert!(age < BACKDATE, "{age:?}");
    // Opening again changes nothing; the queue works as a new one.
    drop(q);
    let q: Arc<dyn RunQueue> = Arc::new(SqliteRunQueue::open(&path).await.unwrap());
    q.submit("counter", "new", json!({})).await.unwrap();
    let w = worker("w1", &counter_graph());
    let claims = q.claim(&w, 10, TTL).await.unwrap();
    assert_eq!(claims.len(), 2);
    assert_eq!(q.stats().await.unwrap().unwrap().oldest_queued_age, None);
}

/// A PostgreSQL schema whose runs table 0.2.0 created (no `queued_since`;
/// made here by dropping it) gains the column on connect.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_queue_of_0_2_0_gains_the_queued_time_on_connect() {
    let schema = unique("queued_since_upgrade");
    let url = pg_url();
    let connect = || {
        PostgresRunQueue::connect_with(
            &url,
            crate::waypoint::PostgresOptions::default()
                .with_schema(&schema)
                .with_pool_size(2),
        )
    };
    let q = connect().await.unwrap();
    q.submit("counter", "old", json!({})).await.unwrap();
    drop(q);
    use std::str::FromStr;
    let config = tokio_postgres::Config::from_str(&pg_url()).unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".aegis_runs DROP COLUMN queued_since"
        ))
        .await
        .unwrap();
    let q = connect().await.unwrap();
    let stats = q.stats().await.unwrap().unwrap();
    assert_eq!(stats.runs_in(RunState::Queued), 1);
    let age = stats.oldest_queued_age.expect("queued since the connect");
    assert!(age < BACKDATE, "{age:?}");
    q.submit("counter", "new", json!({})).await.unwrap();
    let w = worker("w1", &counter_graph());
    assert_eq!(q.claim(&w, 10, TTL).await.unwrap().len(), 2);
    assert_eq!(q.stats().await.unwrap().unwrap().oldest_queued_age, None);
    drop(q);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

fn pool(q: &Arc<dyn RunQueue>, id: &str, graph: WarGraph, ttl: Duration) -> WorkerPool {
    WorkerPool::new(q.clone(), WarEngine::new)
        .with_config(
            WorkerConfig::default()
                .with_worker_id(id)
                .with_lease_ttl(ttl)
                .with_poll_interval(Duration::from_millis(100))
                .with_shutdown_grace(Duration::from_secs(1)),
        )
        .register("counter", graph)
        .unwrap()
}

/// A gate between two counter nodes.
fn parley_graph() -> WarGraph {
    let mut g = counter_graph();
    g.add_node("ask", NodeSpec::gate("go on?", "inc2", END))
        .add_node(
            "inc2",
            NodeSpec::from_fn("inc2", |_, _| {
                Box::pin(async move {
                    let mut d = StateDelta::new();
                    d.set("count", 10)?;
                    Ok(d.into())
                })
            }),
        )
        .add_edge("inc", "ask")
        .add_edge("inc2", END);
    g
}

/// A node that sleeps `secs` (on tokio's clock) before adding 1.
fn slow_graph(secs: u64) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("count").unwrap(),
        DispatchRule::Sum,
        Some(json!(0)),
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "slow",
        NodeSpec::from_fn("slow", move |_, _| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                let mut d = StateDelta::new();
                d.set("count", 1)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "slow")
    .add_edge("slow", END);
    g
}

#[tokio::test(start_paused = true)]
async fn a_pool_runs_submissions_and_delivers_a_parley_answer() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(pool(&q, "w", parley_graph(), TTL).run(stop.clone()));
    client.submit("counter", "t1", json!({})).await.unwrap();
    let s = client.wait("t1", Duration::from_secs(5)).await.unwrap();
    assert_eq!(s.state, RunState::AwaitingInput);
    client
        .answer("t1", ParleyResponse::new(json!("approve")))
        .await
        .unwrap();
    let s = client
        .wait_until("t1", Duration::from_secs(5), |s| s.is_final())
        .await
        .unwrap();
    assert_eq!(s.state, RunState::Completed, "{s:?}");
    let latest = client.latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.state.get("count"), Some(&json!(11)));
    assert_eq!(
        outcomes(&q, "t1").await,
        vec![
            (1, "w".into(), "awaiting_input".into()),
            (2, "w".into(), "completed".into())
        ]
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_halts_a_run_durably_and_another_worker_finishes_it() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let first = tokio::spawn(pool(&q, "first", slow_graph(60), TTL).run(stop.clone()));
    client.submit("counter", "t1", json!({})).await.unwrap();
    client
        .wait_until("t1", Duration::from_secs(5), |s| s == RunState::Running)
        .await
        .unwrap();
    stop.cancel();
    first.await.unwrap().unwrap();
    let s = client.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Queued, "released at shutdown: {s:?}");
    assert_eq!(outcomes(&q, "t1").await[0].2, "halted");
    let stop2 = tokio_util::sync::CancellationToken::new();
    let second = tokio::spawn(pool(&q, "second", slow_graph(60), TTL).run(stop2.clone()));
    let s = client.wait("t1", Duration::from_secs(600)).await.unwrap();
    assert_eq!(s.state, RunState::Completed);
    let latest = client.latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.state.get("count"), Some(&json!(1)), "applied once");
    stop2.cancel();
    second.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dead_workers_thread_is_taken_over_within_ttl_plus_a_poll() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    let ttl = Duration::from_secs(3);
    let dead = tokio::spawn(pool(&q, "dead", slow_graph(60), ttl).run(Default::default()));
    client.submit("counter", "t1", json!({})).await.unwrap();
    client
        .wait_until("t1", Duration::from_secs(5), |s| s == RunState::Running)
        .await
        .unwrap();
    // The process dies: no heartbeat, no release.
    dead.abort();
    let _ = dead.await;
    let died = tokio::time::Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let heir = tokio::spawn(pool(&q, "heir", slow_graph(60), ttl).run(stop.clone()));
    client
        .wait_until("t1", Duration::from_secs(30), |s| s == RunState::Running)
        .await
        .unwrap();
    loop {
        let s = client.status("t1").await.unwrap().unwrap();
        if s.worker_id.as_deref() == Some("heir") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let latency = died.elapsed();
    assert!(
        latency <= ttl + Duration::from_millis(100 + 20),
        "{latency:?}"
    );
    let s = client.wait("t1", Duration::from_secs(600)).await.unwrap();
    assert_eq!(s.state, RunState::Completed);
    assert_eq!(
        outcomes(&q, "t1").await,
        vec![
            (1, "dead".into(), "expired".into()),
            (2, "heir".into(), "completed".into())
        ]
    );
    stop.cancel();
    heir.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_paused_worker_that_lost_its_lease_abandons_the_run() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let g = slow_graph(60);
    q.submit("counter", "t1", json!({})).await.unwrap();
    let mut w = worker("paused", &g);
    w.graphs[0].fingerprint = g.fingerprint();
    let c = claim_one(&q, &w, Duration::from_secs(3)).await;
    // The paused worker's run: it wrote waypoint 0, then its node runs
    // for a minute with no heartbeat (a stopped process).
    let paused = {
        let (q, lease, g) = (q.clone(), c.lease.clone(), g.clone());
        tokio::spawn(async move { engine(&q, &lease).start(&g, "t1", json!({})).await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let heir = claim_one(&q, &worker("heir", &g), TTL).await;
    assert_eq!(heir.lease.epoch, 2);
    let err = paused.await.unwrap().unwrap_err();
    assert!(
        matches!(err, EngineError::Store(StoreError::LeaseLost { .. })),
        "{err:?}"
    );
    // Only waypoint 0 (written under epoch 1 while it held the lease).
    assert_eq!(q.waypoints().history("t1").await.unwrap().len(), 1);
    let resumed = engine(&q, &heir.lease)
        .resume(&g, "t1", None)
        .await
        .unwrap();
    assert!(matches!(resumed, RunOutcome::Completed { .. }));
}

#[tokio::test(start_paused = true)]
async fn cancel_through_the_client_stops_a_running_run() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(pool(&q, "w", slow_graph(600), TTL).run(stop.clone()));
    client.submit("counter", "t1", json!({})).await.unwrap();
    client
        .wait_until("t1", Duration::from_secs(5), |s| s == RunState::Running)
        .await
        .unwrap();
    client.cancel("t1").await.unwrap();
    let s = client.wait("t1", Duration::from_secs(60)).await.unwrap();
    assert_eq!(s.state, RunState::Cancelled);
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[test]
fn a_pool_refuses_a_graph_name_twice() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let err = pool(&q, "w", counter_graph(), TTL)
        .register("counter", counter_graph())
        .unwrap_err();
    assert!(matches!(err, WorkerError::Config(_)));
}

/// `parley_graph` with a node after the gate's approval: a compatible
/// change for a thread waiting at the gate.
fn parley_graph_v2() -> WarGraph {
    gated_graph("ask", Some("audit"))
}

/// A counter node, a gate named `gate`, then `inc2` (adding 10) and, when
/// `after` names one, a node adding 100.
fn gated_graph(gate: &str, after: Option<&'static str>) -> WarGraph {
    let mut g = counter_graph();
    let add = |name: &'static str, n: i64| {
        NodeSpec::from_fn(name, move |_, _| {
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("count", n)?;
                Ok(d.into())
            })
        })
    };
    g.add_node(gate, NodeSpec::gate("go on?", "inc2", END))
        .add_node("inc2", add("inc2", 10))
        .add_edge("inc", gate);
    match after {
        Some(last) => {
            g.add_node(last, add(last, 100))
                .add_edge("inc2", last)
                .add_edge(last, END);
        }
        None => {
            g.add_edge("inc2", END);
        }
    }
    g
}

/// `parley_graph` with the gate renamed: incompatible for a thread waiting
/// at the gate, unless a migration maps it.
fn parley_graph_renamed() -> WarGraph {
    gated_graph("confirm", None)
}

/// Parks `threads` at the gate on a v1 pool, then stops it (as a deploy's
/// SIGTERM does).
async fn parked_by_v1(q: &Arc<dyn RunQueue>, client: &Client, threads: &[&str]) {
    let stop = tokio_util::sync::CancellationToken::new();
    let v1 = tokio::spawn(pool(q, "v1", parley_graph(), TTL).run(stop.clone()));
    for t in threads {
        client.submit("counter", t, json!({})).await.unwrap();
        let s = client.wait(t, Duration::from_secs(5)).await.unwrap();
        assert_eq!(s.state, RunState::AwaitingInput);
    }
    stop.cancel();
    v1.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_rolling_deploy_continues_parked_threads_on_the_new_version() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    parked_by_v1(&q, &client, &["t1", "t2"]).await;
    let v1 = parley_graph().fingerprint();

    let stop = tokio_util::sync::CancellationToken::new();
    let v2 = parley_graph_v2();
    let v2_fingerprint = v2.fingerprint();
    let running = tokio::spawn(pool(&q, "v2", v2, TTL).run(stop.clone()));
    for t in ["t1", "t2"] {
        client
            .answer(t, ParleyResponse::new(json!("approve")))
            .await
            .unwrap();
    }
    for t in ["t1", "t2"] {
        let s = client
            .wait_until(t, Duration::from_secs(5), |s| s.is_final())
            .await
            .unwrap();
        assert_eq!(s.state, RunState::Completed, "{s:?}");
        assert_eq!(s.fingerprint.as_deref(), Some(v2_fingerprint.as_str()));
        assert_eq!(s.previous_fingerprint.as_deref(), Some(v1.as_str()));
        assert_eq!(s.migration, None);
        let latest = client.latest(t).await.unwrap().unwrap();
        // v1's nodes, then v2's new one.
        assert_eq!(latest.state.get("count"), Some(&json!(111)));
        // One claim by v1, one by v2: judging claimed nothing.
        let claims: Vec<_> = outcomes(&q, t).await.into_iter().map(|o| o.1).collect();
        assert_eq!(claims, ["v1", "v2"]);
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_incompatible_version_leaves_the_thread_pinned_until_a_migration_carries_it() {
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(q.clone());
    parked_by_v1(&q, &client, &["t1"]).await;
    let v1 = parley_graph().fingerprint();

    let stop = tokio_util::sync::CancellationToken::new();
    let renamed = tokio::spawn(pool(&q, "renamed", parley_graph_renamed(), TTL).run(stop.clone()));
    client
        .answer("t1", ParleyResponse::new(json!("approve")))
        .await
        .unwrap();
    // A minute of polls: judged once, never claimed.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let s = client.status("t1").await.unwrap().unwrap();
    assert_eq!(s.state, RunState::Queued);
    let reason = s.waiting_reason.unwrap();
    assert!(reason.contains(&v1), "{reason}");
    assert!(
        reason.contains("will run node `ask`, which this graph no longer has"),
        "{reason}"
    );
    assert_eq!(outcomes(&q, "t1").await.len(), 1, "no claim/release churn");
    let pinned = client.pinned(10).await.unwrap();
    assert_eq!(pinned.len(), 1);
    assert!(!pinned[0].verdicts[0].compatible);
    stop.cancel();
    renamed.await.unwrap().unwrap();

    // The next deploy carries it with a migration naming the new gate.
    let mut migrating = parley_graph_renamed();
    migrating
        .with_migration(Migration::new("ask-is-confirm", v1.clone()).map_node("ask", "confirm"));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(pool(&q, "migrating", migrating, TTL).run(stop.clone()));
    let s = client
        .wait_until("t1", Duration::from_secs(5), |s| s.is_final())
        .await
        .unwrap();
    assert_eq!(s.state, RunState::Completed, "{s:?}");
    assert_eq!(s.migration.as_deref(), Some("ask-is-confirm"));
    assert_eq!(s.previous_fingerprint.as_deref(), Some(v1.as_str()));
    let latest = client.latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.state.get("count"), Some(&json!(11)));
    assert!(client.pinned(10).await.unwrap().is_empty());
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Poison rows on a real SQLite file, corrupted by hand under a running
/// pool: a garbage input fails its run at once, an unreadable waypoint and
/// an unreadable answer are quarantined after a bounded number of claims,
/// and the rest of the queue runs on. Backoffs are lifted by a background
/// task so the test steps through the claims at once (their timing is
/// checked by the queue contract above).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_pool_quarantines_poison_rows_and_runs_the_rest() {
    let path = std::env::temp_dir().join(format!("{}.sqlite", unique("poison_pool")));
    let q = Arc::new(SqliteRunQueue::open(&path).await.unwrap());
    let _cleanup = Cleanup(Some(Box::new({
        let path = path.clone();
        move || {
            for suffix in ["", "-wal", "-shm"] {
                let mut f = path.clone().into_os_string();
                f.push(suffix);
                let _ = std::fs::remove_file(f);
            }
        }
    })));
    let dyn_q: Arc<dyn RunQueue> = q.clone();
    let client = Client::new(dyn_q.clone());
    let sql = |statement: String| {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&statement).unwrap();
    };

    // Parked at the gate, then corrupted: one waypoint, one answer.
    let stop = tokio_util::sync::CancellationToken::new();
    let first = tokio::spawn(pool(&dyn_q, "w1", parley_graph(), TTL).run(stop.clone()));
    for t in ["bad-waypoint", "bad-answer"] {
        client.submit("counter", t, json!({})).await.unwrap();
        let s = client.wait(t, Duration::from_secs(10)).await.unwrap();
        assert_eq!(s.state, RunState::AwaitingInput);
    }
    stop.cancel();
    first.await.unwrap().unwrap();
    sql(
        "UPDATE aegis_waypoints SET payload = X'7B2267617262' WHERE thread_id = 'bad-waypoint' \
         AND seq = (SELECT max(seq) FROM aegis_waypoints WHERE thread_id = 'bad-waypoint')"
            .into(),
    );
    client
        .answer("bad-waypoint", ParleyResponse::new(json!("approve")))
        .await
        .unwrap();
    sql(
        "UPDATE aegis_runs SET answer = '{\"value\": tru', state = 'queued' \
         WHERE thread_id = 'bad-answer'"
            .into(),
    );
    client
        .submit("counter", "bad-input", json!({}))
        .await
        .unwrap();
    sql("UPDATE aegis_runs SET input = '{\"flaky\": tru' WHERE thread_id = 'bad-input'".into());
    client.submit("counter", "good", json!({})).await.unwrap();

    let stop = tokio_util::sync::CancellationToken::new();
    let lifting = tokio::spawn({
        let q = q.clone();
        let stop = stop.clone();
        async move {
            while !stop.is_cancelled() {
                q.lift_backoffs().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let running = tokio::spawn(pool(&dyn_q, "w2", parley_graph(), TTL).run(stop.clone()));

    let s = client
        .wait("bad-input", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(s.state, RunState::Failed, "{s:?}");
    assert!(
        matches!(s.fault, Some(RunFault::UnreadableInput { .. })),
        "{s:?}"
    );
    assert_eq!(outcomes(&dyn_q, "bad-input").await.len(), 1);
    for (t, unreadable) in [
        ("bad-waypoint", "waypoints"),
        ("bad-answer", "parley answer"),
    ] {
        let s = client
            .wait_until(t, Duration::from_secs(20), |s| s == RunState::Quarantined)
            .await
            .unwrap();
        assert!(
            s.error.as_deref().is_some_and(|e| e.contains(unreadable)),
            "{s:?}"
        );
        let claims = outcomes(&dyn_q, t).await;
        let unreadable: Vec<_> = claims.iter().filter(|c| c.2 == "unreadable").collect();
        assert_eq!(
            unreadable.len(),
            MAX_UNREADABLE_CLAIMS as usize,
            "{claims:?}"
        );
    }
    // The rest of the queue ran on.
    let s = client.wait("good", Duration::from_secs(20)).await.unwrap();
    assert_eq!(s.state, RunState::AwaitingInput);
    let quarantined: Vec<String> = client
        .quarantined(10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.thread_id)
        .collect();
    assert_eq!(quarantined, ["bad-waypoint", "bad-answer"]);

    // Repaired: the answer is given again and the thread completes.
    client.requeue("bad-answer").await.unwrap();
    client
        .answer("bad-answer", ParleyResponse::new(json!("approve")))
        .await
        .unwrap();
    let s = client
        .wait_until("bad-answer", Duration::from_secs(20), |s| s.is_final())
        .await
        .unwrap();
    assert_eq!(s.state, RunState::Completed, "{s:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
    lifting.await.unwrap();
}

/// A queue whose every call, while `dark`, waits forever: a connection
/// that went dark with no reset and no close.
struct DarkQueue {
    inner: Arc<dyn RunQueue>,
    dark: std::sync::atomic::AtomicBool,
}

impl DarkQueue {
    async fn gate(&self) {
        if self.dark.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait::async_trait]
impl RunQueue for DarkQueue {
    fn waypoints(&self) -> Arc<dyn crate::waypoint::WaypointStore> {
        self.inner.waypoints()
    }
    async fn put_fenced(
        &self,
        lease: &Lease,
        waypoint: crate::waypoint::Waypoint,
    ) -> Result<(), StoreError> {
        self.gate().await;
        self.inner.put_fenced(lease, waypoint).await
    }
    async fn submit(
        &self,
        g: &str,
        t: &str,
        input: serde_json::Value,
    ) -> Result<Submitted, WorkerError> {
        self.inner.submit(g, t, input).await
    }
    async fn register(&self, w: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        self.gate().await;
        self.inner.register(w, ttl).await
    }
    async fn deregister(&self, id: &str) -> Result<(), WorkerError> {
        self.gate().await;
        self.inner.deregister(id).await
    }
    async fn claim(
        &self,
        w: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError> {
        self.gate().await;
        self.inner.claim(w, max, ttl).await
    }
    async fn unjudged(&self, w: &WorkerInfo, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.gate().await;
        self.inner.unjudged(w, max).await
    }
    async fn record_verdict(&self, v: &Verdict) -> Result<(), WorkerError> {
        self.gate().await;
        self.inner.record_verdict(v).await
    }
    async fn pinned(&self, fp: Option<&str>, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.inner.pinned(fp, max).await
    }
    async fn renew(&self, l: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        self.gate().await;
        self.inner.renew(l, ttl).await
    }
    async fn release(&self, l: &Lease, r: Release) -> Result<(), WorkerError> {
        self.gate().await;
        self.inner.release(l, r).await
    }
    async fn abandon(&self, l: &Lease) -> Result<(), WorkerError> {
        self.gate().await;
        self.inner.abandon(l).await
    }
    async fn answer(&self, t: &str, r: ParleyResponse) -> Result<(), WorkerError> {
        self.inner.answer(t, r).await
    }
    async fn requeue(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.requeue(t).await
    }
    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        self.inner.quarantined(max).await
    }
    async fn cancel(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.cancel(t).await
    }
    async fn status(&self, t: &str) -> Result<Option<RunStatus>, WorkerError> {
        self.inner.status(t).await
    }
    async fn attempts(&self, t: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        self.inner.attempts(t).await
    }
    async fn wait_for_change(&self, timeout: Duration) {
        self.inner.wait_for_change(timeout).await
    }
}

/// A node that runs until dropped, recording when it was dropped.
fn endless_graph(dropped: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>) -> WarGraph {
    struct OnDrop(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(tokio::time::Instant::now());
        }
    }
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("count").unwrap(),
        DispatchRule::Sum,
        Some(json!(0)),
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "endless",
        NodeSpec::from_fn("endless", move |_, _| {
            let guard = OnDrop(dropped.clone());
            Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(StateDelta::new().into())
            })
        }),
    )
    .add_edge(START, "endless")
    .add_edge("endless", END);
    g
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_queue_goes_dark_gives_its_lease_up_when_it_runs_out() {
    let inner: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let dark = Arc::new(DarkQueue {
        inner: inner.clone(),
        dark: std::sync::atomic::AtomicBool::new(false),
    });
    let q: Arc<dyn RunQueue> = dark.clone();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let ttl = Duration::from_secs(30);
    let stop = tokio_util::sync::CancellationToken::new();
    let worker_pool = WorkerPool::new(q.clone(), WarEngine::new)
        .with_config(
            WorkerConfig::default()
                .with_worker_id("dark")
                .with_max_runs(1)
                .with_lease_ttl(ttl)
                .with_poll_interval(Duration::from_millis(100)),
        )
        .register("counter", endless_graph(dropped.clone()))
        .unwrap();
    let running = tokio::spawn(worker_pool.run(stop.clone()));
    q.submit("counter", "t1", json!({})).await.unwrap();
    let client = Client::new(inner.clone());
    client
        .wait_until("t1", Duration::from_secs(5), |s| s == RunState::Running)
        .await
        .unwrap();
    // The claim was sent at about `claimed`; the network goes dark.
    let claimed = tokio::time::Instant::now();
    dark.dark.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert!(dropped.lock().unwrap().is_none(), "still within the lease");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Given up as the lease ran out by the worker's own clock: no later
    // than when the queue lets another worker take the thread over.
    let at = dropped.lock().unwrap().expect("the run was dropped");
    let held = at - claimed;
    assert!(held <= ttl, "held {held:?}");
    assert!(held >= ttl - Duration::from_millis(200), "held {held:?}");
    // Another worker takes it over on the queue's clock.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let same = endless_graph(Arc::new(std::sync::Mutex::new(None)));
    let heir = claim_one(&inner, &worker("heir", &same), TTL).await;
    assert_eq!(heir.lease.epoch, 2);
    // The light comes back: the dark worker's slot was freed with the
    // lease, so it claims new work as soon as its claim loop is answered.
    dark.dark.store(false, std::sync::atomic::Ordering::SeqCst);
    q.submit("counter", "t2", json!({})).await.unwrap();
    let s = client
        .wait_until("t2", Duration::from_secs(60), |s| s == RunState::Running)
        .await
        .unwrap();
    assert_eq!(s.worker_id.as_deref(), Some("dark"));
    // Its claim loop was held by one dark claim at most, for the call
    // timeout (half the lease).
    assert!(
        claimed.elapsed() <= ttl / 2 + ttl + Duration::from_secs(1),
        "{:?}",
        claimed.elapsed()
    );
    let first = outcomes(&inner, "t1").await;
    assert_eq!(first[0].2, "expired", "{first:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A queue whose first fenced write fails as a database that did not
/// answer in time does.
struct OneFailedWrite {
    inner: Arc<dyn RunQueue>,
    failed: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl RunQueue for OneFailedWrite {
    fn waypoints(&self) -> Arc<dyn crate::waypoint::WaypointStore> {
        self.inner.waypoints()
    }
    async fn put_fenced(
        &self,
        lease: &Lease,
        waypoint: crate::waypoint::Waypoint,
    ) -> Result<(), StoreError> {
        if !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Backend(
                "postgres: no answer within 500ms".into(),
            ));
        }
        self.inner.put_fenced(lease, waypoint).await
    }
    async fn submit(
        &self,
        g: &str,
        t: &str,
        i: serde_json::Value,
    ) -> Result<Submitted, WorkerError> {
        self.inner.submit(g, t, i).await
    }
    async fn register(&self, w: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        self.inner.register(w, ttl).await
    }
    async fn deregister(&self, id: &str) -> Result<(), WorkerError> {
        self.inner.deregister(id).await
    }
    async fn claim(
        &self,
        w: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError> {
        self.inner.claim(w, max, ttl).await
    }
    async fn unjudged(&self, w: &WorkerInfo, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.inner.unjudged(w, max).await
    }
    async fn record_verdict(&self, v: &Verdict) -> Result<(), WorkerError> {
        self.inner.record_verdict(v).await
    }
    async fn pinned(&self, fp: Option<&str>, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.inner.pinned(fp, max).await
    }
    async fn renew(&self, l: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        self.inner.renew(l, ttl).await
    }
    async fn release(&self, l: &Lease, r: Release) -> Result<(), WorkerError> {
        self.inner.release(l, r).await
    }
    async fn abandon(&self, l: &Lease) -> Result<(), WorkerError> {
        self.inner.abandon(l).await
    }
    async fn answer(&self, t: &str, r: ParleyResponse) -> Result<(), WorkerError> {
        self.inner.answer(t, r).await
    }
    async fn requeue(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.requeue(t).await
    }
    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        self.inner.quarantined(max).await
    }
    async fn cancel(&self, t: &str) -> Result<(), WorkerError> {
        self.inner.cancel(t).await
    }
    async fn status(&self, t: &str) -> Result<Option<RunStatus>, WorkerError> {
        self.inner.status(t).await
    }
    async fn attempts(&self, t: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        self.inner.attempts(t).await
    }
    async fn wait_for_change(&self, timeout: Duration) {
        self.inner.wait_for_change(timeout).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_a_write_sends_the_run_back_to_the_queue_not_to_failed() {
    let inner: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    let q: Arc<dyn RunQueue> = Arc::new(OneFailedWrite {
        inner: inner.clone(),
        failed: std::sync::atomic::AtomicBool::new(false),
    });
    let client = Client::new(q.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(pool(&q, "w", counter_graph(), TTL).run(stop.clone()));
    client.submit("counter", "t1", json!({})).await.unwrap();
    let s = client
        .wait_until("t1", Duration::from_secs(30), |s| s.is_final())
        .await
        .unwrap();
    assert_eq!(s.state, RunState::Completed, "{s:?}");
    let claims = outcomes(&inner, "t1").await;
    assert_eq!(claims[0].2, "halted", "{claims:?}");
    assert_eq!(claims.last().unwrap().2, "completed", "{claims:?}");
    let latest = client.latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.state.get("count"), Some(&json!(1)), "applied once");
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A queue written before `runs` and `retry_now` existed (it implements
/// neither) still compiles, and says what it cannot do.
#[tokio::test]
async fn a_queue_without_the_console_methods_answers_unsupported() {
    let q = OneFailedWrite {
        inner: Arc::new(InMemoryRunQueue::new()),
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    q.submit("counter", "t1", json!({})).await.unwrap();
    let listed = q.runs(None, None, 10).await;
    assert!(
        matches!(listed, Err(WorkerError::Unsupported(what)) if what == "listing runs"),
        "{listed:?}"
    );
    let retried = q.retry_now("t1").await.unwrap_err();
    assert_eq!(
        retried.to_string(),
        "this run queue does not support retrying a run now"
    );
}
