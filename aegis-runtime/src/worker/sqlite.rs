//! [`SqliteRunQueue`]: the run queue in the SQLite file that holds the
//! waypoints: the embedded default.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

use super::epoch_column::{epoch_from, epoch_to};
use super::types::{claiming_graph, runs_fingerprint, to_judge, waiting_reason};
use super::{
    AttemptInfo, Claim, GraphKey, Lease, PinnedRun, QueueStats, Release, Renewal, RunFault,
    RunQueue, RunState, RunStatus, Submitted, Verdict, WorkerError, WorkerInfo,
};
use crate::error::StoreError;
use crate::graph::{EffectLedger, ParleyResponse};
use crate::waypoint::{
    SqliteEffectFence, SqliteWaypointStore, Waypoint, WaypointStore, sqlite_fenced_effects,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aegis_runs (
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
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    queued_ms INTEGER
);
CREATE INDEX IF NOT EXISTS aegis_runs_by_state ON aegis_runs (state);
CREATE TABLE IF NOT EXISTS aegis_workers (
    worker_id TEXT PRIMARY KEY,
    graphs TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS aegis_run_attempts (
    thread_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    PRIMARY KEY (thread_id, epoch)
);
CREATE TABLE IF NOT EXISTS aegis_run_verdicts (
    thread_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    migrations TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    pinned_to TEXT NOT NULL,
    compatible INTEGER NOT NULL,
    migration TEXT,
    reason TEXT,
    PRIMARY KEY (thread_id, fingerprint, migrations)
);
CREATE TABLE IF NOT EXISTS aegis_run_faults (
    thread_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    message TEXT NOT NULL,
    count INTEGER NOT NULL,
    not_before_ms INTEGER
);
CREATE TABLE IF NOT EXISTS aegis_run_moves (
    thread_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    from_fingerprint TEXT NOT NULL,
    to_fingerprint TEXT NOT NULL,
    migration TEXT,
    PRIMARY KEY (thread_id, epoch)
);";

/// Gives a runs table created before runs recorded when they were queued
/// (0.2.0) its `queued_ms` column (when the run last entered the `queued`
/// state, in wall-clock milliseconds), counting the runs queued at the
/// upgrade as queued since then. Read first, so an open of an up-to-date
/// file takes no write lock; added in an `IMMEDIATE` transaction that reads
/// again, so processes opening the file at once add it once.
fn add_queued_ms(conn: &mut Connection) -> Result<(), WorkerError> {
    fn has(c: &Connection) -> Result<bool, WorkerError> {
        c.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info('aegis_runs') WHERE name = 'queued_ms')",
            [],
            |r| r.get(0),
        )
        .map_err(backend)
    }
    if has(conn)? {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    if !has(&tx)? {
        tx.execute("ALTER TABLE aegis_runs ADD COLUMN queued_ms INTEGER", [])
            .map_err(backend)?;
        tx.execute(
            "UPDATE aegis_runs SET queued_ms = ?1 WHERE state = 'queued'",
            params![now_ms()],
        )
        .map_err(backend)?;
    }
    tx.commit().map_err(backend)
}

/// The run queue in a SQLite file, beside the waypoints of a
/// [`SqliteWaypointStore`] on the same file: the same API as the
/// PostgreSQL fleet, durable, with nothing to run.
///
/// Meant for one process (one [`WorkerPool`](super::WorkerPool) or more,
/// and clients, sharing this value): claims are atomic across processes
/// (each is one `IMMEDIATE` transaction), but the fencing check and the
/// waypoint write are made atomic by a lock inside this value, so only
/// writers sharing it are fenced against each other. Use PostgreSQL for
/// several processes. Lease times are the wall clock.
pub struct SqliteRunQueue {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    store: Arc<SqliteWaypointStore>,
    /// Held across a claim and across a fenced write's check and write.
    fence: tokio::sync::Mutex<()>,
    changed: Notify,
}

impl fmt::Debug for SqliteRunQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteRunQueue")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn backend(e: rusqlite::Error) -> WorkerError {
    WorkerError::Store(StoreError::Backend(format!("sqlite run queue: {e}")))
}

fn join_error(e: tokio::task::JoinError) -> WorkerError {
    WorkerError::Store(StoreError::Backend(format!(
        "sqlite run queue: a blocking task failed: {e}"
    )))
}

fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn expiry_ms(ttl: Duration) -> i64 {
    now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

fn encode_graphs(graphs: &[GraphKey]) -> String {
    Value::Array(
        graphs
            .iter()
            .map(|g| {
                Value::Array(vec![
                    g.name.clone().into(),
                    g.fingerprint.clone().into(),
                    g.migrations.clone().into(),
                ])
            })
            .collect(),
    )
    .to_string()
}

/// The graphs a worker row lists (a row written before migrations were
/// listed has none); an unreadable row lists none.
fn decode_graphs(text: &str) -> Vec<GraphKey> {
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let parts = item.as_array()?;
            let key = GraphKey::new(parts.first()?.as_str()?, parts.get(1)?.as_str()?);
            Some(match parts.get(2).and_then(Value::as_str) {
                Some(m) => key.with_migrations(m),
                None => key,
            })
        })
        .collect()
}

/// The workers whose registration has not expired at `now`.
fn live_workers(c: &Connection, now: i64) -> Result<Vec<WorkerInfo>, WorkerError> {
    let mut live = c
        .prepare_cached("SELECT worker_id, graphs FROM aegis_workers WHERE expires_ms > ?1")
        .map_err(backend)?;
    live.query_map(params![now], |r| {
        Ok(WorkerInfo {
            worker_id: r.get(0)?,
            graphs: decode_graphs(&r.get::<_, String>(1)?),
        })
    })
    .map_err(backend)?
    .collect::<Result<Vec<_>, _>>()
    .map_err(backend)
}

/// The verdicts on `thread_id` at `epoch`.
fn verdicts_of(c: &Connection, thread_id: &str, epoch: u64) -> Result<Vec<Verdict>, WorkerError> {
    let mut q = c
        .prepare_cached(
            "SELECT fingerprint, migrations, pinned_to, compatible, migration, reason \
             FROM aegis_run_verdicts WHERE thread_id = ?1 AND epoch = ?2",
        )
        .map_err(backend)?;
    q.query_map(params![thread_id, epoch_to(epoch)], |r| {
        let run = PinnedRun::new(
            thread_id,
            "",
            RunState::Queued,
            epoch,
            r.get::<_, String>(2)?,
        );
        let key = GraphKey::new("", r.get::<_, String>(0)?).with_migrations(r.get::<_, String>(1)?);
        Ok(if r.get::<_, bool>(3)? {
            Verdict::compatible(&run, &key, r.get(4)?)
        } else {
            Verdict::incompatible(
                &run,
                &key,
                r.get::<_, Option<String>>(5)?.unwrap_or_default(),
            )
        })
    })
    .map_err(backend)?
    .collect::<Result<Vec<_>, _>>()
    .map_err(backend)
}

/// The unfinished runs `select` picks (columns: thread_id, graph_name,
/// state, epoch, fingerprint), oldest first, that wait for a worker (queued,
/// awaiting input, or running under a lease expired at `now`) and are
/// pinned to a fingerprint; `keep` decides which to return, given the run
/// and its verdicts at its epoch, until `max` are kept.
fn pinned_runs(
    c: &Connection,
    now: i64,
    max: usize,
    mut keep: impl FnMut(&PinnedRun) -> bool,
) -> Result<Vec<PinnedRun>, WorkerError> {
    let mut q = c
        .prepare_cached(
            "SELECT thread_id, graph_name, state, epoch, fingerprint FROM aegis_runs \
             WHERE fingerprint IS NOT NULL AND (state IN ('queued', 'awaiting_input') \
             OR (state = 'running' AND expires_ms <= ?1)) ORDER BY rowid",
        )
        .map_err(backend)?;
    let mut rows = q.query(params![now]).map_err(backend)?;
    let mut found = Vec::new();
    while found.len() < max {
        let Some(row) = rows.next().map_err(backend)? else {
            break;
        };
        let state: String = row.get(2).map_err(backend)?;
        let mut run = PinnedRun::new(
            row.get::<_, String>(0).map_err(backend)?,
            row.get::<_, String>(1).map_err(backend)?,
            RunState::parse(&state).unwrap_or(RunState::Queued),
            epoch_from(row.get(3).map_err(backend)?),
            row.get::<_, String>(4).map_err(backend)?,
        );
        run.verdicts = verdicts_of(c, &run.thread_id, run.epoch)?;
        if keep(&run) {
            found.push(run);
        }
    }
    Ok(found)
}

/// A thread a claim picked, as its row stood.
struct Picked {
    thread_id: String,
    graph_name: String,
    input: String,
    answer: Option<String>,
    state: String,
    epoch: i64,
    /// The fingerprint it was pinned to, if any.
    from: Option<String>,
    /// The claimer's graph's fingerprint: the thread's from now on.
    fingerprint: String,
    /// The migration carrying it onto that graph, when it moves by one.
    migration: Option<String>,
}

fn lost(lease: &Lease) -> WorkerError {
    WorkerError::LeaseLost {
        thread_id: lease.thread_id.clone(),
        epoch: lease.epoch,
    }
}

impl SqliteRunQueue {
    /// Opens (creating if needed) the queue and its waypoint store in the
    /// file at `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, WorkerError> {
        let path = path.as_ref().to_path_buf();
        let store = SqliteWaypointStore::open(&path).await?;
        let p = path.clone();
        let conn = tokio::task::spawn_blocking(move || {
            let mut conn = Connection::open(&p).map_err(backend)?;
            conn.busy_timeout(Duration::from_secs(5)).map_err(backend)?;
            conn.execute_batch(SCHEMA).map_err(backend)?;
            add_queued_ms(&mut conn)?;
            Ok::<_, WorkerError>(conn)
        })
        .await
        .map_err(join_error)??;
        Ok(SqliteRunQueue {
            path,
            conn: Arc::new(Mutex::new(conn)),
            store: Arc::new(store),
            fence: tokio::sync::Mutex::new(()),
            changed: Notify::new(),
        })
    }

    /// Ends every unreadable thread's backoff, for tests that step
    /// through the claims a poisoned thread gets.
    #[cfg(test)]
    pub(crate) async fn lift_backoffs(&self) {
        let _ = self
            .with(|c| {
                c.execute("UPDATE aegis_run_faults SET not_before_ms = NULL", [])
                    .map_err(backend)
            })
            .await;
    }

    /// Moves every queued run's queued-since time `by` into the past, for
    /// tests of the oldest queued run's age.
    #[cfg(test)]
    pub(crate) async fn backdate_queued(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let _ = self
            .with(move |c| {
                c.execute(
                    "UPDATE aegis_runs SET queued_ms = queued_ms - ?1 WHERE state = 'queued'",
                    params![by],
                )
                .map_err(backend)
            })
            .await;
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, WorkerError> + Send + 'static,
    ) -> Result<T, WorkerError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await
        .map_err(join_error)?
    }

    /// The statuses of `threads`, in order; a thread gone meanwhile is
    /// left out.
    async fn statuses(&self, threads: Vec<String>) -> Result<Vec<RunStatus>, WorkerError> {
        let mut found = Vec::with_capacity(threads.len());
        for t in threads {
            if let Some(status) = self.status(&t).await? {
                found.push(status);
            }
        }
        Ok(found)
    }

    /// The thread's epoch and state.
    async fn holder(&self, thread_id: &str) -> Result<Option<(u64, String)>, WorkerError> {
        let thread_id = thread_id.to_string();
        self.with(move |c| {
            c.query_row(
                "SELECT epoch, state FROM aegis_runs WHERE thread_id = ?1",
                params![thread_id],
                |r| Ok((epoch_from(r.get(0)?), r.get::<_, String>(1)?)),
            )
            .optional()
            .map_err(backend)
        })
        .await
    }
}

fn set_outcome(
    c: &Connection,
    thread_id: &str,
    epoch: u64,
    outcome: &str,
) -> Result<(), WorkerError> {
    c.execute(
        "UPDATE aegis_run_attempts SET outcome = ?3 WHERE thread_id = ?1 AND epoch = ?2",
        params![thread_id, epoch_to(epoch), outcome],
    )
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl RunQueue for SqliteRunQueue {
    fn waypoints(&self) -> Arc<dyn WaypointStore> {
        self.store.clone()
    }

    fn effect_ledger(&self, lease: &Lease) -> Option<Arc<dyn EffectLedger>> {
        Some(sqlite_fenced_effects(
            self.conn.clone(),
            SqliteEffectFence {
                key: lease.thread_id.clone(),
                epoch: epoch_to(lease.epoch),
            },
        ))
    }

    async fn put_fenced(&self, lease: &Lease, waypoint: Waypoint) -> Result<(), StoreError> {
        let _fence = self.fence.lock().await;
        let holder = self.holder(&lease.thread_id).await.map_err(|e| match e {
            WorkerError::Store(s) => s,
            other => StoreError::Backend(other.to_string()),
        })?;
        match holder {
            Some((epoch, state)) if epoch == lease.epoch && state == "running" => {
                self.store.put(waypoint).await
            }
            other => Err(StoreError::LeaseLost {
                thread_id: lease.thread_id.clone(),
                epoch: lease.epoch,
                current: other.map_or(0, |(e, _)| e),
            }),
        }
    }

    async fn submit(
        &self,
        graph_name: &str,
        thread_id: &str,
        input: Value,
    ) -> Result<Submitted, WorkerError> {
        super::validate_submission(graph_name, thread_id, &input)?;
        let (graph, thread) = (graph_name.to_string(), thread_id.to_string());
        let existing = self
            .with(move |c| {
                let inserted = c
                    .execute(
                        "INSERT INTO aegis_runs (thread_id, graph_name, input, state, queued_ms) \
                         VALUES (?1, ?2, ?3, 'queued', ?4) ON CONFLICT (thread_id) DO NOTHING",
                        params![thread, graph, input.to_string(), now_ms()],
                    )
                    .map_err(backend)?;
                if inserted == 1 {
                    return Ok(None);
                }
                c.query_row(
                    "SELECT graph_name FROM aegis_runs WHERE thread_id = ?1",
                    params![thread],
                    |r| r.get::<_, String>(0),
                )
                .map(Some)
                .map_err(backend)
            })
            .await?;
        match existing {
            None => {
                super::wake(&self.changed);
                Ok(Submitted::New)
            }
            Some(existing) => super::existing_submission(thread_id, &existing, graph_name),
        }
    }

    async fn register(&self, worker: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        let (id, graphs, until) = (
            worker.worker_id.clone(),
            encode_graphs(&worker.graphs),
            expiry_ms(ttl),
        );
        self.with(move |c| {
            c.execute(
                "INSERT INTO aegis_workers (worker_id, graphs, expires_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (worker_id) DO UPDATE SET graphs = ?2, expires_ms = ?3",
                params![id, graphs, until],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), WorkerError> {
        let id = worker_id.to_string();
        self.with(move |c| {
            c.execute(
                "DELETE FROM aegis_workers WHERE worker_id = ?1",
                params![id],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn claim(
        &self,
        worker: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError> {
        let _fence = self.fence.lock().await;
        let worker = worker.clone();
        self.with(move |c| {
            let now = now_ms();
            let until = expiry_ms(ttl);
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            tx.execute(
                "UPDATE aegis_run_attempts SET outcome = 'expired' WHERE outcome = 'running' \
                 AND (thread_id, epoch) IN (SELECT thread_id, epoch FROM aegis_runs \
                 WHERE state = 'running' AND cancel_requested = 1 AND expires_ms <= ?1)",
                params![now],
            )
            .map_err(backend)?;
            tx.execute(
                "UPDATE aegis_runs SET state = 'cancelled', worker_id = NULL, expires_ms = NULL \
                 WHERE state = 'running' AND cancel_requested = 1 AND expires_ms <= ?1",
                params![now],
            )
            .map_err(backend)?;
            let live = live_workers(&tx, now)?;
            let mut picked: Vec<Picked> = Vec::new();
            {
                let mut due = tx
                    .prepare(
                        "SELECT thread_id, graph_name, input, answer, fingerprint, state, epoch \
                         FROM aegis_runs r WHERE (state = 'queued' \
                         OR (state = 'running' AND expires_ms <= ?1)) \
                         AND NOT EXISTS (SELECT 1 FROM aegis_run_faults f \
                           WHERE f.thread_id = r.thread_id AND f.not_before_ms > ?1) \
                         ORDER BY rowid",
                    )
                    .map_err(backend)?;
                let mut rows = due.query(params![now]).map_err(backend)?;
                while picked.len() < max {
                    let Some(row) = rows.next().map_err(backend)? else {
                        break;
                    };
                    let thread_id: String = row.get(0).map_err(backend)?;
                    let graph: String = row.get(1).map_err(backend)?;
                    let fingerprint: Option<String> = row.get(4).map_err(backend)?;
                    let epoch: i64 = row.get(6).map_err(backend)?;
                    // The common case, an unbound thread or one of this
                    // worker's fingerprint, needs no verdicts.
                    let mut verdicts = Vec::new();
                    let mut graph_key = claiming_graph(
                        &worker.graphs,
                        &graph,
                        fingerprint.as_deref(),
                        true,
                        &verdicts,
                    );
                    if let Some(fp) = fingerprint.as_deref()
                        && graph_key.is_none()
                        && !runs_fingerprint(&live, &graph, fp)
                    {
                        verdicts = verdicts_of(&tx, &thread_id, epoch_from(epoch))?;
                        graph_key =
                            claiming_graph(&worker.graphs, &graph, Some(fp), false, &verdicts);
                    }
                    let Some(key) = graph_key else {
                        continue;
                    };
                    let migration = verdicts
                        .iter()
                        .find(|v| v.is_by(key))
                        .and_then(|v| v.migration.clone());
                    picked.push(Picked {
                        thread_id,
                        graph_name: graph,
                        input: row.get(2).map_err(backend)?,
                        answer: row.get(3).map_err(backend)?,
                        state: row.get(5).map_err(backend)?,
                        epoch,
                        from: fingerprint,
                        fingerprint: key.fingerprint.clone(),
                        migration,
                    });
                }
            }
            let mut claims = Vec::with_capacity(picked.len());
            for p in picked {
                if p.state == "running" {
                    set_outcome(&tx, &p.thread_id, epoch_from(p.epoch), "expired")?;
                }
                let next = p.epoch.saturating_add(1);
                tx.execute(
                    "UPDATE aegis_runs SET state = 'running', epoch = ?2, worker_id = ?3, \
                     expires_ms = ?4, fingerprint = ?5 WHERE thread_id = ?1",
                    params![p.thread_id, next, worker.worker_id, until, p.fingerprint],
                )
                .map_err(backend)?;
                tx.execute(
                    "INSERT OR REPLACE INTO aegis_run_attempts (thread_id, epoch, worker_id, outcome) \
                     VALUES (?1, ?2, ?3, 'running')",
                    params![p.thread_id, next, worker.worker_id],
                )
                .map_err(backend)?;
                if let Some(from) = p.from.filter(|from| *from != p.fingerprint) {
                    tx.execute(
                        "INSERT OR REPLACE INTO aegis_run_moves \
                         (thread_id, epoch, from_fingerprint, to_fingerprint, migration) \
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![p.thread_id, next, from, p.fingerprint, p.migration],
                    )
                    .map_err(backend)?;
                }
                claims.push(Claim::from_stored(
                    Lease {
                        thread_id: p.thread_id,
                        epoch: epoch_from(next),
                        worker_id: worker.worker_id.clone(),
                    },
                    p.graph_name,
                    &p.input,
                    p.answer.as_deref(),
                ));
            }
            tx.commit().map_err(backend)?;
            Ok(claims)
        })
        .await
    }

    async fn unjudged(
        &self,
        worker: &WorkerInfo,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        let worker = worker.clone();
        self.with(move |c| {
            pinned_runs(c, now_ms(), max, |run| {
                to_judge(&worker, &run.graph_name, &run.fingerprint, &run.verdicts).is_some()
            })
            .map(|runs| {
                runs.into_iter()
                    .map(|mut r| {
                        r.verdicts.clear();
                        r
                    })
                    .collect()
            })
        })
        .await
    }

    async fn record_verdict(&self, verdict: &Verdict) -> Result<(), WorkerError> {
        let v = verdict.clone();
        self.with(move |c| {
            c.execute(
                "INSERT INTO aegis_run_verdicts (thread_id, fingerprint, migrations, epoch, \
                 pinned_to, compatible, migration, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
                 ON CONFLICT (thread_id, fingerprint, migrations) DO UPDATE SET epoch = ?4, \
                 pinned_to = ?5, compatible = ?6, migration = ?7, reason = ?8",
                params![
                    v.thread_id,
                    v.fingerprint,
                    v.migrations,
                    epoch_to(v.epoch),
                    v.pinned_to,
                    v.compatible,
                    v.migration,
                    v.reason
                ],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn pinned(
        &self,
        fingerprint: Option<&str>,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        let wanted = fingerprint.map(str::to_string);
        self.with(move |c| {
            let now = now_ms();
            let live = live_workers(c, now)?;
            pinned_runs(c, now, max, |run| match &wanted {
                Some(fp) => *fp == run.fingerprint,
                None => !runs_fingerprint(&live, &run.graph_name, &run.fingerprint),
            })
        })
        .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        let l = lease.clone();
        let renewed = self
            .with(move |c| {
                c.query_row(
                    "UPDATE aegis_runs SET expires_ms = ?3 WHERE thread_id = ?1 AND epoch = ?2 \
                     AND state = 'running' RETURNING cancel_requested",
                    params![l.thread_id, epoch_to(l.epoch), expiry_ms(ttl)],
                    |r| r.get::<_, bool>(0),
                )
                .optional()
                .map_err(backend)
            })
            .await?;
        match renewed {
            Some(cancel_requested) => Ok(Renewal { cancel_requested }),
            None => Err(lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease, release: Release) -> Result<(), WorkerError> {
        let l = lease.clone();
        let released = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend)?;
                let mut next = release.state();
                let mut held_until = None;
                if let Release::Poisoned(fault) = &release {
                    let count: i64 = tx
                        .query_row(
                            "SELECT count FROM aegis_run_faults WHERE thread_id = ?1",
                            params![l.thread_id],
                            |r| r.get(0),
                        )
                        .optional()
                        .map_err(backend)?
                        .unwrap_or(0);
                    let count = u32::try_from(count).unwrap_or(u32::MAX).saturating_add(1);
                    let (state, wait) = fault.next(count);
                    next = state;
                    held_until = wait.map(expiry_ms);
                }
                let n = tx
                    .execute(
                        // An unreadable answer stays, for the operator to
                        // see; any other release delivered the answer.
                        "UPDATE aegis_runs SET state = CASE WHEN ?3 = 'queued' AND cancel_requested = 1 \
                         THEN 'cancelled' ELSE ?3 END, worker_id = NULL, expires_ms = NULL, \
                         error = ?4, answer = CASE WHEN ?5 THEN answer END, \
                         queued_ms = CASE WHEN ?3 = 'queued' THEN ?6 ELSE queued_ms END \
                         WHERE thread_id = ?1 AND epoch = ?2 AND state = 'running'",
                        params![
                            l.thread_id,
                            epoch_to(l.epoch),
                            next.as_str(),
                            release.error(),
                            matches!(release, Release::Poisoned(RunFault::UnreadableAnswer { .. })),
                            now_ms(),
                        ],
                    )
                    .map_err(backend)?;
                if n == 1 {
                    set_outcome(&tx, &l.thread_id, l.epoch, release.outcome())?;
                    match &release {
                        Release::Poisoned(fault) => {
                            tx.execute(
                                "INSERT INTO aegis_run_faults (thread_id, kind, message, count, not_before_ms) \
                                 VALUES (?1, ?2, ?3, 1, ?4) ON CONFLICT (thread_id) DO UPDATE SET \
                                 kind = ?2, message = ?3, count = count + 1, not_before_ms = ?4",
                                params![l.thread_id, fault.kind(), fault.message(), held_until],
                            )
                            .map_err(backend)?;
                        }
                        // The thread was read: whatever failed before is over.
                        _ => {
                            tx.execute(
                                "DELETE FROM aegis_run_faults WHERE thread_id = ?1",
                                params![l.thread_id],
                            )
                            .map_err(backend)?;
                        }
                    }
                    // A finished run is judged no more.
                    if next.is_final() {
                        tx.execute(
                            "DELETE FROM aegis_run_verdicts WHERE thread_id = ?1",
                            params![l.thread_id],
                        )
                        .map_err(backend)?;
                    }
                }
                tx.commit().map_err(backend)?;
                Ok((n == 1).then_some(held_until.is_some()))
            })
            .await?;
        match released {
            None => Err(lost(lease)),
            // Held back by a backoff: nobody may claim it yet.
            Some(true) => Ok(()),
            Some(false) => {
                super::wake(&self.changed);
                Ok(())
            }
        }
    }

    async fn requeue(&self, thread_id: &str) -> Result<(), WorkerError> {
        let thread = thread_id.to_string();
        let state = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend)?;
                let state: Option<String> = tx
                    .query_row(
                        "SELECT state FROM aegis_runs WHERE thread_id = ?1",
                        params![thread],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                if state.as_deref() == Some("quarantined") {
                    // An unreadable answer is dropped: the run waits for a
                    // new one. Anything else runs again from its rows.
                    tx.execute(
                        "UPDATE aegis_runs SET error = NULL, queued_ms = ?2, \
                         state = CASE WHEN EXISTS (SELECT 1 FROM aegis_run_faults \
                           WHERE thread_id = ?1 AND kind = 'answer') THEN 'awaiting_input' ELSE 'queued' END, \
                         answer = CASE WHEN EXISTS (SELECT 1 FROM aegis_run_faults \
                           WHERE thread_id = ?1 AND kind = 'answer') THEN NULL ELSE answer END \
                         WHERE thread_id = ?1",
                        params![thread, now_ms()],
                    )
                    .map_err(backend)?;
                    tx.execute(
                        "DELETE FROM aegis_run_faults WHERE thread_id = ?1",
                        params![thread],
                    )
                    .map_err(backend)?;
                }
                tx.commit().map_err(backend)?;
                Ok(state)
            })
            .await?;
        let requeued = state.as_deref() == Some("quarantined");
        if requeued {
            super::wake(&self.changed);
        }
        super::state_checked(requeued, state, thread_id, |thread_id, state| {
            WorkerError::NotQuarantined { thread_id, state }
        })
    }

    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        let threads: Vec<String> = self
            .with(move |c| {
                let mut q = c
                    .prepare_cached(
                        "SELECT thread_id FROM aegis_runs WHERE state = 'quarantined' \
                         ORDER BY rowid LIMIT ?1",
                    )
                    .map_err(backend)?;
                q.query_map(params![i64::try_from(max).unwrap_or(i64::MAX)], |r| {
                    r.get(0)
                })
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)
            })
            .await?;
        self.statuses(threads).await
    }

    async fn stats(&self) -> Result<Option<QueueStats>, WorkerError> {
        self.with(|c| {
            let mut stats = QueueStats::new();
            let mut q = c
                .prepare_cached("SELECT state, count(*) FROM aegis_runs GROUP BY state")
                .map_err(backend)?;
            let rows = q
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(backend)?;
            for row in rows {
                let (state, n) = row.map_err(backend)?;
                if let Some(state) = RunState::parse(&state) {
                    stats = stats.with_runs(state, u64::try_from(n).unwrap_or(0));
                }
            }
            let mut q = c
                .prepare_cached("SELECT outcome, count(*) FROM aegis_run_attempts GROUP BY outcome")
                .map_err(backend)?;
            let rows = q
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(backend)?;
            for row in rows {
                let (outcome, n) = row.map_err(backend)?;
                stats = stats.with_claims(&outcome, u64::try_from(n).unwrap_or(0));
            }
            let oldest: Option<i64> = c
                .prepare_cached("SELECT min(queued_ms) FROM aegis_runs WHERE state = 'queued'")
                .map_err(backend)?
                .query_row([], |r| r.get(0))
                .map_err(backend)?;
            if let Some(since) = oldest {
                let age = now_ms().saturating_sub(since).max(0);
                stats = stats.with_queued_age(Duration::from_millis(age.unsigned_abs()));
            }
            Ok(Some(stats))
        })
        .await
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), WorkerError> {
        let l = lease.clone();
        self.with(move |c| set_outcome(c, &l.thread_id, l.epoch, "abandoned"))
            .await
    }

    async fn answer(&self, thread_id: &str, response: ParleyResponse) -> Result<(), WorkerError> {
        let thread = thread_id.to_string();
        let answer = serde_json::to_string(&response)
            .map_err(|e| WorkerError::InvalidSubmission(format!("unserializable answer: {e}")))?;
        let state = self
            .with(move |c| {
                let n = c
                    .execute(
                        "UPDATE aegis_runs SET state = 'queued', answer = ?2, queued_ms = ?3 \
                         WHERE thread_id = ?1 AND state = 'awaiting_input'",
                        params![thread, answer, now_ms()],
                    )
                    .map_err(backend)?;
                if n == 1 {
                    return Ok(None);
                }
                c.query_row(
                    "SELECT state FROM aegis_runs WHERE thread_id = ?1",
                    params![thread],
                    |r| r.get::<_, String>(0),
                )
                .optional()
                .map(|s| Some(s.unwrap_or_default()))
                .map_err(backend)
            })
            .await?;
        match state {
            None => {
                super::wake(&self.changed);
                Ok(())
            }
            Some(s) if s.is_empty() => Err(WorkerError::UnknownThread {
                thread_id: thread_id.to_string(),
            }),
            Some(state) => Err(WorkerError::NotAwaitingInput {
                thread_id: thread_id.to_string(),
                state,
            }),
        }
    }

    async fn cancel(&self, thread_id: &str) -> Result<(), WorkerError> {
        let thread = thread_id.to_string();
        let found = self
            .with(move |c| {
                c.execute(
                    "UPDATE aegis_runs SET state = CASE WHEN state IN ('queued', 'awaiting_input') \
                     THEN 'cancelled' ELSE state END, \
                     cancel_requested = CASE WHEN state = 'running' THEN 1 ELSE cancel_requested END \
                     WHERE thread_id = ?1",
                    params![thread],
                )
                .map_err(backend)
            })
            .await?;
        if found == 0 {
            return Err(WorkerError::UnknownThread {
                thread_id: thread_id.to_string(),
            });
        }
        super::wake(&self.changed);
        Ok(())
    }

    async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, WorkerError> {
        let thread = thread_id.to_string();
        self.with(move |c| {
            let now = now_ms();
            let row = c
                .query_row(
                    "SELECT graph_name, state, epoch, worker_id, fingerprint, error, expires_ms \
                     FROM aegis_runs WHERE thread_id = ?1",
                    params![thread],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, Option<String>>(5)?,
                            r.get::<_, Option<i64>>(6)?,
                        ))
                    },
                )
                .optional()
                .map_err(backend)?;
            let Some((graph_name, state, epoch, worker_id, fingerprint, error, expires)) = row
            else {
                return Ok(None);
            };
            let state = RunState::parse(&state).ok_or_else(|| {
                WorkerError::Store(StoreError::Backend(format!(
                    "sqlite run queue: unknown run state {state:?}"
                )))
            })?;
            let expired = state == RunState::Running && expires.is_some_and(|e| e <= now);
            let waiting = if state == RunState::Queued || expired {
                let workers = live_workers(c, now)?;
                let verdicts = verdicts_of(c, &thread, epoch_from(epoch))?;
                waiting_reason(&graph_name, fingerprint.as_deref(), &workers, &verdicts)
            } else {
                None
            };
            let fault: Option<(String, String)> = c
                .query_row(
                    "SELECT kind, message FROM aegis_run_faults WHERE thread_id = ?1",
                    params![thread],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            let moved: Option<(String, Option<String>)> = c
                .query_row(
                    "SELECT from_fingerprint, migration FROM aegis_run_moves \
                     WHERE thread_id = ?1 ORDER BY epoch DESC LIMIT 1",
                    params![thread],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            Ok(Some(RunStatus {
                thread_id: thread.clone(),
                graph_name,
                state,
                epoch: epoch_from(epoch),
                worker_id,
                fingerprint,
                error,
                waiting_reason: waiting,
                previous_fingerprint: moved.as_ref().map(|(from, _)| from.clone()),
                migration: moved.and_then(|(_, m)| m),
                fault: fault.and_then(|(kind, message)| RunFault::parse(&kind, message)),
            }))
        })
        .await
    }

    async fn runs(
        &self,
        state: Option<RunState>,
        graph_name: Option<&str>,
        max: usize,
    ) -> Result<Vec<RunStatus>, WorkerError> {
        let state = state.map(RunState::as_str);
        let graph = graph_name.map(str::to_string);
        let threads: Vec<String> = self
            .with(move |c| {
                let mut q = c
                    .prepare_cached(
                        "SELECT thread_id FROM aegis_runs WHERE (?1 IS NULL OR state = ?1) \
                         AND (?2 IS NULL OR graph_name = ?2) ORDER BY rowid DESC LIMIT ?3",
                    )
                    .map_err(backend)?;
                q.query_map(
                    params![state, graph, i64::try_from(max).unwrap_or(i64::MAX)],
                    |r| r.get(0),
                )
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)
            })
            .await?;
        self.statuses(threads).await
    }

    async fn retry_now(&self, thread_id: &str) -> Result<(), WorkerError> {
        let thread = thread_id.to_string();
        let known = self
            .with(move |c| {
                c.execute(
                    "UPDATE aegis_run_faults SET not_before_ms = NULL WHERE thread_id = ?1",
                    params![thread],
                )
                .map_err(backend)?;
                c.query_row(
                    "SELECT 1 FROM aegis_runs WHERE thread_id = ?1",
                    params![thread],
                    |_| Ok(()),
                )
                .optional()
                .map_err(backend)
            })
            .await?;
        if known.is_none() {
            return Err(WorkerError::UnknownThread {
                thread_id: thread_id.to_string(),
            });
        }
        super::wake(&self.changed);
        Ok(())
    }

    async fn attempts(&self, thread_id: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        let thread = thread_id.to_string();
        self.with(move |c| {
            let mut q = c
                .prepare(
                    "SELECT epoch, worker_id, outcome FROM aegis_run_attempts \
                     WHERE thread_id = ?1 ORDER BY epoch",
                )
                .map_err(backend)?;
            q.query_map(params![thread], |r| {
                Ok(AttemptInfo {
                    epoch: epoch_from(r.get(0)?),
                    worker_id: r.get(1)?,
                    outcome: r.get(2)?,
                })
            })
            .map_err(backend)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)
        })
        .await
    }

    async fn wait_for_change(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }
}
