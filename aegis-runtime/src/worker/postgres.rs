//! [`PostgresRunQueue`]: the run queue of a fleet of worker processes, in
//! the PostgreSQL schema that holds their waypoints.

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::epoch_column::{epoch_from, epoch_to};
use super::types::{to_judge, waiting_reason};
use super::{
    AttemptInfo, Claim, GraphKey, Lease, PinnedRun, QueueStats, Release, Renewal, RunFault,
    RunQueue, RunState, RunStatus, Submitted, Verdict, WorkerError, WorkerInfo,
};
use crate::error::StoreError;
use crate::graph::{EffectLedger, ParleyResponse};
use crate::waypoint::{
    PgEffectFence, PgFence, PgPool, PostgresOptions, PostgresWaypointStore, Waypoint,
    WaypointStore, pg_backend, pg_parse_connection, pg_quote_schema,
};

/// Serialises the queue's schema setup across processes (with the schema
/// name's hash as the second key); distinct from the waypoint store's.
const SETUP_LOCK: i32 = 0x4165_6777; // "Aegw"

const RUNS: &str = "aegis_runs";

/// The queue's tables, created if missing. `{s}` is the quoted schema,
/// `{channel}` the `NOTIFY` channel. A trigger notifies every change a
/// worker or client waits for (new or re-queued runs, finished or waiting
/// ones), on commit.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS {s}.aegis_runs (
    thread_id TEXT PRIMARY KEY,
    graph_name TEXT NOT NULL,
    input TEXT NOT NULL,
    state TEXT NOT NULL,
    epoch BIGINT NOT NULL DEFAULT 0,
    worker_id TEXT,
    lease_expires_at TIMESTAMPTZ,
    fingerprint TEXT,
    answer TEXT,
    error TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    queued_at BIGSERIAL,
    queued_since TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS aegis_runs_due ON {s}.aegis_runs (queued_at)
    WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS {s}.aegis_workers (
    worker_id TEXT PRIMARY KEY,
    graph_names TEXT[] NOT NULL,
    fingerprints TEXT[] NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    migrations TEXT[]
);
CREATE TABLE IF NOT EXISTS {s}.aegis_run_attempts (
    thread_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    worker_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, epoch)
);
{added}
CREATE OR REPLACE FUNCTION {s}.aegis_runs_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{channel}', NEW.thread_id);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS aegis_runs_notify ON {s}.aegis_runs;
CREATE TRIGGER aegis_runs_notify AFTER INSERT OR UPDATE OF state ON {s}.aegis_runs
    FOR EACH ROW WHEN (NEW.state <> 'running') EXECUTE FUNCTION {s}.aegis_runs_notify();";

/// The tables added after the first release: what each graph judged of a
/// thread pinned to another, the moves claims made (rolling deploys), and
/// the threads claims found unreadable. Created on their own when a schema
/// has the rest, since they lock nothing the workers use.
const ADDED: &str = "
CREATE TABLE IF NOT EXISTS {s}.aegis_run_faults (
    thread_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    message TEXT NOT NULL,
    count INTEGER NOT NULL,
    not_before TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS {s}.aegis_run_verdicts (
    thread_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    migrations TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    pinned_to TEXT NOT NULL,
    compatible BOOLEAN NOT NULL,
    migration TEXT,
    reason TEXT,
    judged_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, fingerprint, migrations)
);
CREATE TABLE IF NOT EXISTS {s}.aegis_run_moves (
    thread_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    from_fingerprint TEXT NOT NULL,
    to_fingerprint TEXT NOT NULL,
    migration TEXT,
    moved_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, epoch)
);
ALTER TABLE {s}.aegis_workers ADD COLUMN IF NOT EXISTS migrations TEXT[];";

/// Gives a runs table created before runs recorded when they were queued
/// (0.2.0) its `queued_since` column: when the run last entered the
/// `queued` state (`queued_at` is a sequence, for ordering). The runs
/// queued at the upgrade count as queued since then.
const QUEUED_SINCE: &str = "
ALTER TABLE {s}.aegis_runs ADD COLUMN IF NOT EXISTS queued_since TIMESTAMPTZ NOT NULL DEFAULT now();";

/// The run queue in PostgreSQL: any number of worker and client processes
/// share it.
///
/// A claim is one statement (`FOR UPDATE SKIP LOCKED`, so concurrent
/// claimers never block on or share a thread) that bumps each thread's
/// epoch. Every fenced waypoint write is one statement that reads the
/// thread's run row `FOR SHARE` and writes only if the epoch is still the
/// writer's, so a claim and a stale write serialise on that row. Lease
/// expiry is the server's clock. Workers wake on `LISTEN`/`NOTIFY` (a
/// trigger notifies each change), with polling as the fallback.
///
/// Connections come from a `deadpool-postgres` pool; TLS is rustls, as the
/// connection string's `sslmode` asks (`require`, `verify-ca`,
/// `verify-full`).
pub struct PostgresRunQueue {
    pool: PgPool,
    store: Arc<PostgresWaypointStore>,
    quoted: String,
    changed: Arc<Notify>,
    _listener: DropGuard,
}

impl fmt::Debug for PostgresRunQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may hold a password: never shown.
        f.debug_struct("PostgresRunQueue")
            .field("schema", &self.quoted)
            .finish_non_exhaustive()
    }
}

fn backend(e: tokio_postgres::Error) -> WorkerError {
    WorkerError::Store(pg_backend(e))
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn lost(lease: &Lease) -> WorkerError {
    WorkerError::LeaseLost {
        thread_id: lease.thread_id.clone(),
        epoch: lease.epoch,
    }
}

/// A channel name per schema, short enough for any schema name.
fn channel(schema: &str) -> String {
    let digest = Sha256::digest(schema.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("aegis_runs_{hex}")
}

impl PostgresRunQueue {
    /// Connects to the `public` schema (see [`Self::connect_with`]).
    pub async fn connect(connection: &str) -> Result<Self, WorkerError> {
        Self::connect_with(connection, PostgresOptions::default()).await
    }

    /// Connects with `options` (schema, pool size, waypoint encoding),
    /// creating the waypoint store's and the queue's tables if missing.
    pub async fn connect_with(
        connection: &str,
        options: PostgresOptions,
    ) -> Result<Self, WorkerError> {
        let store = PostgresWaypointStore::connect_with(connection, options.clone()).await?;
        let (config, tls) = pg_parse_connection(connection)?;
        // Built as the waypoint store's pool is, but its own: a lease's queue
        // statements (renewals) never wait behind waypoint writes.
        let pool = PgPool::new(
            config.clone(),
            tls.clone(),
            options.pool_size,
            options.call_timeout,
        )?;
        let tls = match tls {
            Some(tls) => tls,
            // `sslmode=disable`: the connector is never used.
            None => crate::waypoint::pg_tls_connector()?,
        };
        let quoted = pg_quote_schema(&options.schema)?;
        let channel = channel(&options.schema);
        {
            let mut client = pool.get().await?;
            let tx = client.transaction().await.map_err(backend)?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2::text))",
                &[&SETUP_LOCK, &options.schema],
            )
            .await
            .map_err(backend)?;
            // The trigger is created last: once it exists, so does the rest,
            // and no DDL runs (a DDL statement's exclusive lock on the runs
            // table would deadlock with workers already using it).
            let ready: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_trigger \
                     WHERE tgname = 'aegis_runs_notify' AND tgrelid = to_regclass($1::text))",
                    &[&format!("{quoted}.aegis_runs")],
                )
                .await
                .map_err(backend)?
                .try_get(0)
                .map_err(backend)?;
            if !ready {
                tx.batch_execute(
                    &SCHEMA
                        .replace("{added}", ADDED)
                        .replace("{s}", &quoted)
                        .replace("{channel}", &channel),
                )
                .await
                .map_err(backend)?;
            } else {
                let has_added: bool = tx
                    .query_one(
                        "SELECT to_regclass($1::text) IS NOT NULL",
                        &[&format!("{quoted}.aegis_run_faults")],
                    )
                    .await
                    .map_err(backend)?
                    .try_get(0)
                    .map_err(backend)?;
                if !has_added {
                    tx.batch_execute(&ADDED.replace("{s}", &quoted))
                        .await
                        .map_err(backend)?;
                }
            }
            // A runs table of 0.2.0 lacks `queued_since`. Checked first:
            // the DDL would lock the runs table even when the column is
            // there.
            let has_queued_since: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1::text) \
                     AND attname = 'queued_since' AND NOT attisdropped)",
                    &[&format!("{quoted}.aegis_runs")],
                )
                .await
                .map_err(backend)?
                .try_get(0)
                .map_err(backend)?;
            if !has_queued_since {
                tx.batch_execute(&QUEUED_SINCE.replace("{s}", &quoted))
                    .await
                    .map_err(backend)?;
            }
            tx.commit().await.map_err(backend)?;
        }
        let changed = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        tokio::spawn(listen(config, tls, channel, changed.clone(), stop.clone()));
        Ok(PostgresRunQueue {
            pool,
            store: Arc::new(store),
            quoted,
            changed,
            _listener: stop.drop_guard(),
        })
    }

    /// Ends every unreadable thread's backoff, for tests that step
    /// through the claims a poisoned thread gets.
    #[cfg(test)]
    pub(crate) async fn lift_backoffs(&self) {
        if let Ok(client) = self.client().await {
            let _ = client
                .execute(
                    &self.sql("UPDATE {s}.aegis_run_faults SET not_before = NULL"),
                    &[],
                )
                .await;
        }
    }

    /// Moves every queued run's queued-since time `by` into the past, for
    /// tests of the oldest queued run's age.
    #[cfg(test)]
    pub(crate) async fn backdate_queued(&self, by: Duration) {
        if let Ok(client) = self.client().await {
            let _ = client
                .execute(
                    &self.sql(
                        "UPDATE {s}.aegis_runs SET queued_since = queued_since \
                         - $1::BIGINT * interval '1 millisecond' WHERE state = 'queued'",
                    ),
                    &[&ttl_ms(by)],
                )
                .await;
        }
    }

    /// The waypoint store on the queue's schema.
    pub fn store(&self) -> &Arc<PostgresWaypointStore> {
        &self.store
    }

    fn sql(&self, text: &str) -> String {
        text.replace("{s}", &self.quoted)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, WorkerError> {
        Ok(self.pool.get().await?)
    }

    /// The statuses of the threads `query` selects (its one column), in
    /// its order; a thread gone meanwhile is left out.
    async fn statuses_where(
        &self,
        query: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<RunStatus>, WorkerError> {
        let threads: Vec<String> = self
            .client()
            .await?
            .query(&self.sql(query), params)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| r.try_get(0).map_err(backend))
            .collect::<Result<_, _>>()?;
        let mut found = Vec::with_capacity(threads.len());
        for t in threads {
            if let Some(status) = self.status(&t).await? {
                found.push(status);
            }
        }
        Ok(found)
    }

    /// Ends `lease` for a thread its holder could not run as stored: the
    /// run's next state depends on how many claims in a row found it so
    /// ([`RunFault::next`]), read and written in one transaction.
    async fn release_poisoned(&self, lease: &Lease, fault: &RunFault) -> Result<(), WorkerError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(backend)?;
        let count: Option<i32> = tx
            .query_opt(
                &self.sql("SELECT count FROM {s}.aegis_run_faults WHERE thread_id = $1 FOR UPDATE"),
                &[&lease.thread_id],
            )
            .await
            .map_err(backend)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(backend)?;
        let count = u32::try_from(count.unwrap_or(0))
            .unwrap_or(0)
            .saturating_add(1);
        let (next, wait) = fault.next(count);
        let keep_answer = matches!(fault, RunFault::UnreadableAnswer { .. });
        let updated = tx
            .execute(
                &self.sql(
                    "UPDATE {s}.aegis_runs SET state = CASE WHEN $3 = 'queued' AND cancel_requested \
                     THEN 'cancelled' ELSE $3 END, worker_id = NULL, lease_expires_at = NULL, \
                     error = $4, answer = CASE WHEN $5 THEN answer END, \
                     queued_since = CASE WHEN $3 = 'queued' THEN now() ELSE queued_since END \
                     WHERE thread_id = $1 AND epoch = $2 AND state = 'running'",
                ),
                &[
                    &lease.thread_id,
                    &epoch_to(lease.epoch),
                    &next.as_str(),
                    &fault.to_string(),
                    &keep_answer,
                ],
            )
            .await
            .map_err(backend)?;
        if updated != 1 {
            return Err(lost(lease));
        }
        let wait_ms = wait.map(ttl_ms);
        tx.execute(
            &self.sql(
                "INSERT INTO {s}.aegis_run_faults (thread_id, kind, message, count, not_before) \
                 VALUES ($1, $2, $3, 1, now() + $4::BIGINT * interval '1 millisecond') \
                 ON CONFLICT (thread_id) DO UPDATE SET kind = EXCLUDED.kind, \
                 message = EXCLUDED.message, count = {s}.aegis_run_faults.count + 1, \
                 not_before = EXCLUDED.not_before",
            ),
            &[&lease.thread_id, &fault.kind(), &fault.message(), &wait_ms],
        )
        .await
        .map_err(backend)?;
        tx.execute(
            &self.sql(
                "UPDATE {s}.aegis_run_attempts SET outcome = 'unreadable' \
                 WHERE thread_id = $1 AND epoch = $2",
            ),
            &[&lease.thread_id, &epoch_to(lease.epoch)],
        )
        .await
        .map_err(backend)?;
        if next.is_final() {
            tx.execute(
                &self.sql("DELETE FROM {s}.aegis_run_verdicts WHERE thread_id = $1"),
                &[&lease.thread_id],
            )
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    /// `call`, failed after the options' `call_timeout`.
    async fn within<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, WorkerError>>,
    ) -> Result<T, WorkerError> {
        match self.pool.within(async { Ok(call.await) }).await {
            Ok(result) => result,
            Err(timed_out) => Err(WorkerError::Store(timed_out)),
        }
    }

    /// The verdicts on `thread_id` at `epoch`.
    async fn verdicts_of(
        &self,
        client: &deadpool_postgres::Object,
        thread_id: &str,
        epoch: u64,
    ) -> Result<Vec<Verdict>, WorkerError> {
        let statement = client
            .prepare_cached(&self.sql(
                "SELECT fingerprint, migrations, pinned_to, compatible, migration, reason \
                 FROM {s}.aegis_run_verdicts WHERE thread_id = $1 AND epoch = $2 \
                 ORDER BY fingerprint, migrations",
            ))
            .await
            .map_err(backend)?;
        let rows = client
            .query(&statement, &[&thread_id, &epoch_to(epoch)])
            .await
            .map_err(backend)?;
        rows.iter()
            .map(|r| {
                let run = PinnedRun::new(
                    thread_id,
                    "",
                    RunState::Queued,
                    epoch,
                    r.try_get::<_, String>(2).map_err(backend)?,
                );
                let key = GraphKey::new("", r.try_get::<_, String>(0).map_err(backend)?)
                    .with_migrations(r.try_get::<_, String>(1).map_err(backend)?);
                Ok(if r.try_get::<_, bool>(3).map_err(backend)? {
                    Verdict::compatible(&run, &key, r.try_get(4).map_err(backend)?)
                } else {
                    let reason: Option<String> = r.try_get(5).map_err(backend)?;
                    Verdict::incompatible(&run, &key, reason.unwrap_or_default())
                })
            })
            .collect()
    }
}

/// A worker's graphs as the claim statements take them: names,
/// fingerprints and migration digests, in step.
fn graph_columns(worker: &WorkerInfo) -> (Vec<&str>, Vec<&str>, Vec<&str>) {
    let names = worker.graphs.iter().map(|g| g.name.as_str()).collect();
    let fps = worker
        .graphs
        .iter()
        .map(|g| g.fingerprint.as_str())
        .collect();
    let migrations = worker
        .graphs
        .iter()
        .map(|g| g.migrations.as_str())
        .collect();
    (names, fps, migrations)
}

/// A run row (thread_id, graph_name, state, epoch, fingerprint) as a pinned
/// run without verdicts.
fn pinned_row(r: &tokio_postgres::Row) -> Result<PinnedRun, WorkerError> {
    let state: String = r.try_get(2).map_err(backend)?;
    Ok(PinnedRun::new(
        r.try_get::<_, String>(0).map_err(backend)?,
        r.try_get::<_, String>(1).map_err(backend)?,
        RunState::parse(&state).unwrap_or(RunState::Queued),
        epoch_from(r.try_get(3).map_err(backend)?),
        r.try_get::<_, String>(4).map_err(backend)?,
    ))
}

/// Keeps a `LISTEN` connection open and turns notifications into wake-ups;
/// reconnects after a failure (waking everyone, since a notification may
/// have been missed), until `stop`.
async fn listen(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    channel: String,
    changed: Arc<Notify>,
    stop: CancellationToken,
) {
    let retry = Duration::from_millis(500);
    while !stop.is_cancelled() {
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            c = config.connect(tls.clone()) => c,
        };
        let (client, mut connection) = match connected {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %pg_backend(e), "aegis run queue: LISTEN connection failed");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(retry) => continue,
                }
            }
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = futures::StreamExt::next(&mut messages).await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => {
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
        if let Err(e) = client.batch_execute(&format!("LISTEN {channel}")).await {
            tracing::warn!(error = %pg_backend(e), "aegis run queue: LISTEN failed");
            driver.abort();
            continue;
        }
        super::wake(&changed);
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    driver.abort();
                    return;
                }
                got = rx.recv() => match got {
                    Some(()) => super::wake(&changed),
                    None => break,
                },
            }
        }
        super::wake(&changed);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

#[async_trait]
impl RunQueue for PostgresRunQueue {
    fn waypoints(&self) -> Arc<dyn WaypointStore> {
        self.store.clone()
    }

    fn effect_ledger(&self, lease: &Lease) -> Option<Arc<dyn EffectLedger>> {
        Some(self.store.fenced_effects(PgEffectFence {
            table: RUNS,
            key: lease.thread_id.clone(),
            epoch: epoch_to(lease.epoch),
        }))
    }

    async fn put_fenced(&self, lease: &Lease, waypoint: Waypoint) -> Result<(), StoreError> {
        self.store
            .put_fenced(
                waypoint,
                PgFence {
                    table: RUNS,
                    key: &lease.thread_id,
                    epoch: epoch_to(lease.epoch),
                },
            )
            .await
    }

    async fn submit(
        &self,
        graph_name: &str,
        thread_id: &str,
        input: Value,
    ) -> Result<Submitted, WorkerError> {
        self.within(async {
            super::validate_submission(graph_name, thread_id, &input)?;
            let client = self.client().await?;
            let sql = self.sql(
                "WITH ins AS (INSERT INTO {s}.aegis_runs (thread_id, graph_name, input, state) \
                 VALUES ($1, $2, $3, 'queued') ON CONFLICT (thread_id) DO NOTHING RETURNING graph_name) \
                 SELECT TRUE, graph_name FROM ins \
                 UNION ALL SELECT FALSE, graph_name FROM {s}.aegis_runs WHERE thread_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM ins)",
            );
            let statement = client.prepare_cached(&sql).await.map_err(backend)?;
            let input = input.to_string();
            let mut row = None;
            // A concurrent submission of the same thread makes this statement's
            // insert wait for it and then do nothing, while its snapshot cannot
            // see the row yet: one more statement (a new snapshot) does.
            for _ in 0..2 {
                row = client
                    .query_opt(&statement, &[&thread_id, &graph_name, &input])
                    .await
                    .map_err(backend)?;
                if row.is_some() {
                    break;
                }
            }
            match row {
                Some(r) if r.try_get::<_, bool>(0).map_err(backend)? => Ok(Submitted::New),
                Some(r) => {
                    let existing: String = r.try_get(1).map_err(backend)?;
                    super::existing_submission(thread_id, &existing, graph_name)
                }
                None => Err(WorkerError::Store(StoreError::Backend(format!(
                    "postgres run queue: thread `{thread_id}` is being submitted concurrently; retry"
                )))),
            }
        })
            .await
    }

    async fn register(&self, worker: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let sql = self.sql(
                "INSERT INTO {s}.aegis_workers (worker_id, graph_names, fingerprints, migrations, expires_at) \
                 VALUES ($1, $2, $3, $5, now() + $4::BIGINT * interval '1 millisecond') \
                 ON CONFLICT (worker_id) DO UPDATE SET graph_names = $2, fingerprints = $3, \
                 migrations = $5, expires_at = EXCLUDED.expires_at",
            );
            let statement = client.prepare_cached(&sql).await.map_err(backend)?;
            let (names, fps, migrations) = graph_columns(worker);
            client
                .execute(
                    &statement,
                    &[&worker.worker_id, &names, &fps, &ttl_ms(ttl), &migrations],
                )
                .await
                .map_err(backend)?;
            Ok(())
        })
            .await
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            client
                .execute(
                    &self.sql("DELETE FROM {s}.aegis_workers WHERE worker_id = $1"),
                    &[&worker_id],
                )
                .await
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
        self.within(async {
            let client = self.client().await?;
            // A run whose holder died after a cancel request ends cancelled
            // instead of being taken over.
            let cancel = client
                .prepare_cached(&self.sql(
                    "WITH c AS (UPDATE {s}.aegis_runs SET state = 'cancelled', worker_id = NULL, \
                     lease_expires_at = NULL WHERE state = 'running' AND cancel_requested \
                     AND lease_expires_at <= now() RETURNING thread_id, epoch) \
                     UPDATE {s}.aegis_run_attempts a SET outcome = 'expired' FROM c \
                     WHERE a.thread_id = c.thread_id AND a.epoch = c.epoch AND a.outcome = 'running'",
                ))
                .await
                .map_err(backend)?;
            client.execute(&cancel, &[]).await.map_err(backend)?;
            // A thread is this worker's when it is unbound, or pinned to the
            // fingerprint of its graph of that name; or, when no live worker
            // runs the fingerprint it is pinned to, when this worker's graph
            // judged it compatible at its current epoch. A claim of the last
            // kind records the move.
            let claim = client
                .prepare_cached(&self.sql(
                    "WITH due AS ( \
                       SELECT r.thread_id, r.state AS old_state, r.epoch AS old_epoch, \
                         r.fingerprint AS old_fp, g.f AS fp, g.migration \
                       FROM {s}.aegis_runs r \
                       CROSS JOIN LATERAL (SELECT g.f, v.migration \
                         FROM unnest($2::TEXT[], $3::TEXT[], $6::TEXT[]) AS g(n, f, m) \
                         LEFT JOIN {s}.aegis_run_verdicts v ON v.thread_id = r.thread_id \
                           AND v.fingerprint = g.f AND v.migrations = g.m AND v.epoch = r.epoch \
                           AND v.compatible \
                         WHERE g.n = r.graph_name AND (r.fingerprint IS NULL OR r.fingerprint = g.f \
                           OR (v.thread_id IS NOT NULL AND NOT EXISTS ( \
                             SELECT 1 FROM {s}.aegis_workers w, unnest(w.graph_names, w.fingerprints) AS x(n, f) \
                             WHERE w.expires_at > now() AND x.n = r.graph_name AND x.f = r.fingerprint))) \
                         LIMIT 1) g \
                       WHERE (r.state = 'queued' OR (r.state = 'running' AND r.lease_expires_at <= now() \
                         AND NOT r.cancel_requested)) \
                         AND NOT EXISTS (SELECT 1 FROM {s}.aegis_run_faults f \
                           WHERE f.thread_id = r.thread_id AND f.not_before > now()) \
                       ORDER BY r.queued_at LIMIT $4 \
                       FOR UPDATE OF r SKIP LOCKED), \
                     claimed AS ( \
                       UPDATE {s}.aegis_runs r SET state = 'running', epoch = r.epoch + 1, \
                         worker_id = $1, fingerprint = due.fp, \
                         lease_expires_at = now() + $5::BIGINT * interval '1 millisecond' \
                       FROM due WHERE r.thread_id = due.thread_id \
                       RETURNING r.thread_id, r.epoch, r.graph_name, r.input, r.answer, \
                         due.old_state, due.old_epoch, due.old_fp, due.fp, due.migration, r.queued_at), \
                     expired AS ( \
                       UPDATE {s}.aegis_run_attempts a SET outcome = 'expired' FROM claimed c \
                       WHERE a.thread_id = c.thread_id AND a.epoch = c.old_epoch \
                         AND c.old_state = 'running' AND a.outcome = 'running'), \
                     attempts AS ( \
                       INSERT INTO {s}.aegis_run_attempts (thread_id, epoch, worker_id, outcome) \
                       SELECT thread_id, epoch, $1, 'running' FROM claimed), \
                     moves AS ( \
                       INSERT INTO {s}.aegis_run_moves \
                         (thread_id, epoch, from_fingerprint, to_fingerprint, migration) \
                       SELECT thread_id, epoch, old_fp, fp, migration FROM claimed \
                       WHERE old_fp IS NOT NULL AND old_fp <> fp) \
                     SELECT thread_id, epoch, graph_name, input, answer FROM claimed ORDER BY queued_at",
                ))
                .await
                .map_err(backend)?;
            let (names, fps, migrations) = graph_columns(worker);
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            let rows = client
                .query(
                    &claim,
                    &[
                        &worker.worker_id,
                        &names,
                        &fps,
                        &max,
                        &ttl_ms(ttl),
                        &migrations,
                    ],
                )
                .await
                .map_err(backend)?;
            rows.iter()
                .map(|r| {
                    let input: String = r.try_get(3).map_err(backend)?;
                    let answer: Option<String> = r.try_get(4).map_err(backend)?;
                    Ok(Claim::from_stored(
                        Lease {
                            thread_id: r.try_get(0).map_err(backend)?,
                            epoch: epoch_from(r.try_get(1).map_err(backend)?),
                            worker_id: worker.worker_id.clone(),
                        },
                        r.try_get(2).map_err(backend)?,
                        &input,
                        answer.as_deref(),
                    ))
                })
                .collect()
        })
            .await
    }

    async fn unjudged(
        &self,
        worker: &WorkerInfo,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        self.within(async {
            let client = self.client().await?;
            // A run is listed once per graph of this worker's with its name and
            // another fingerprint that has no verdict on it at its epoch.
            let statement = client
                .prepare_cached(&self.sql(
                    "SELECT r.thread_id, r.graph_name, r.state, r.epoch, r.fingerprint \
                     FROM {s}.aegis_runs r \
                     JOIN unnest($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS g(n, f, m) \
                       ON g.n = r.graph_name AND r.fingerprint <> g.f \
                     WHERE (r.state IN ('queued', 'awaiting_input') \
                       OR (r.state = 'running' AND r.lease_expires_at <= now())) \
                       AND NOT EXISTS (SELECT 1 FROM {s}.aegis_run_verdicts v \
                         WHERE v.thread_id = r.thread_id AND v.fingerprint = g.f \
                         AND v.migrations = g.m AND v.epoch = r.epoch) \
                     ORDER BY r.queued_at LIMIT $4",
                ))
                .await
                .map_err(backend)?;
            let (names, fps, migrations) = graph_columns(worker);
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            let rows = client
                .query(&statement, &[&names, &fps, &migrations, &max])
                .await
                .map_err(backend)?;
            let runs = rows.iter().map(pinned_row).collect::<Result<Vec<_>, _>>()?;
            // The query and `to_judge` agree; the filter keeps one rule.
            Ok(runs
                .into_iter()
                .filter(|r| to_judge(worker, &r.graph_name, &r.fingerprint, &r.verdicts).is_some())
                .collect())
        })
        .await
    }

    async fn record_verdict(&self, verdict: &Verdict) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let statement = client
            .prepare_cached(&self.sql(
                "INSERT INTO {s}.aegis_run_verdicts (thread_id, fingerprint, migrations, epoch, \
                 pinned_to, compatible, migration, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (thread_id, fingerprint, migrations) DO UPDATE SET \
                 epoch = EXCLUDED.epoch, pinned_to = EXCLUDED.pinned_to, \
                 compatible = EXCLUDED.compatible, migration = EXCLUDED.migration, \
                 reason = EXCLUDED.reason, judged_at = now()",
            ))
            .await
            .map_err(backend)?;
            client
                .execute(
                    &statement,
                    &[
                        &verdict.thread_id,
                        &verdict.fingerprint,
                        &verdict.migrations,
                        &epoch_to(verdict.epoch),
                        &verdict.pinned_to,
                        &verdict.compatible,
                        &verdict.migration,
                        &verdict.reason,
                    ],
                )
                .await
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
        self.within(async {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&self.sql(
                    "SELECT r.thread_id, r.graph_name, r.state, r.epoch, r.fingerprint \
                     FROM {s}.aegis_runs r \
                     WHERE r.fingerprint IS NOT NULL \
                       AND (r.state IN ('queued', 'awaiting_input') \
                         OR (r.state = 'running' AND r.lease_expires_at <= now())) \
                       AND CASE WHEN $1::TEXT IS NULL THEN NOT EXISTS ( \
                           SELECT 1 FROM {s}.aegis_workers w, unnest(w.graph_names, w.fingerprints) AS x(n, f) \
                           WHERE w.expires_at > now() AND x.n = r.graph_name AND x.f = r.fingerprint) \
                         ELSE r.fingerprint = $1 END \
                     ORDER BY r.queued_at LIMIT $2",
                ))
                .await
                .map_err(backend)?;
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            let rows = client
                .query(&statement, &[&fingerprint, &max])
                .await
                .map_err(backend)?;
            let mut runs = rows.iter().map(pinned_row).collect::<Result<Vec<_>, _>>()?;
            for run in &mut runs {
                run.verdicts = self.verdicts_of(&client, &run.thread_id, run.epoch).await?;
            }
            Ok(runs)
        })
            .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&self.sql(
                    "UPDATE {s}.aegis_runs SET lease_expires_at = now() + $3::BIGINT * interval '1 millisecond' \
                     WHERE thread_id = $1 AND epoch = $2 AND state = 'running' RETURNING cancel_requested",
                ))
                .await
                .map_err(backend)?;
            let row = client
                .query_opt(
                    &statement,
                    &[&lease.thread_id, &epoch_to(lease.epoch), &ttl_ms(ttl)],
                )
                .await
                .map_err(backend)?;
            match row {
                Some(r) => Ok(Renewal {
                    cancel_requested: r.try_get(0).map_err(backend)?,
                }),
                None => Err(lost(lease)),
            }
        })
            .await
    }

    async fn release(&self, lease: &Lease, release: Release) -> Result<(), WorkerError> {
        self.within(async {
            if let Release::Poisoned(fault) = &release {
                return self.release_poisoned(lease, fault).await;
            }
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&self.sql(
                    "WITH r AS (UPDATE {s}.aegis_runs SET \
                       state = CASE WHEN $3 = 'queued' AND cancel_requested THEN 'cancelled' ELSE $3 END, \
                       worker_id = NULL, lease_expires_at = NULL, error = $4, answer = NULL, \
                       queued_since = CASE WHEN $3 = 'queued' THEN now() ELSE queued_since END \
                     WHERE thread_id = $1 AND epoch = $2 AND state = 'running' RETURNING thread_id), \
                     a AS (UPDATE {s}.aegis_run_attempts SET outcome = $5 \
                       WHERE thread_id = $1 AND epoch = $2 AND EXISTS (SELECT 1 FROM r)), \
                     v AS (DELETE FROM {s}.aegis_run_verdicts WHERE thread_id = $1 \
                       AND $3 IN ('completed', 'failed', 'cancelled') AND EXISTS (SELECT 1 FROM r)), \
                     f AS (DELETE FROM {s}.aegis_run_faults WHERE thread_id = $1 \
                       AND EXISTS (SELECT 1 FROM r)) \
                     SELECT count(*) FROM r",
                ))
                .await
                .map_err(backend)?;
            let row = client
                .query_one(
                    &statement,
                    &[
                        &lease.thread_id,
                        &epoch_to(lease.epoch),
                        &release.state().as_str(),
                        &release.error(),
                        &release.outcome(),
                    ],
                )
                .await
                .map_err(backend)?;
            let n: i64 = row.try_get(0).map_err(backend)?;
            if n == 1 { Ok(()) } else { Err(lost(lease)) }
        })
            .await
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            client
                .execute(
                    &self.sql(
                        "UPDATE {s}.aegis_run_attempts SET outcome = 'abandoned' \
                         WHERE thread_id = $1 AND epoch = $2",
                    ),
                    &[&lease.thread_id, &epoch_to(lease.epoch)],
                )
                .await
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn answer(&self, thread_id: &str, response: ParleyResponse) -> Result<(), WorkerError> {
        self.within(async {
            let answer = serde_json::to_string(&response).map_err(|e| {
                WorkerError::InvalidSubmission(format!("unserializable answer: {e}"))
            })?;
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&self.sql(
                    "WITH u AS (UPDATE {s}.aegis_runs SET state = 'queued', answer = $2, queued_since = now() \
                 WHERE thread_id = $1 AND state = 'awaiting_input' RETURNING thread_id) \
                 SELECT EXISTS (SELECT 1 FROM u), \
                 (SELECT state FROM {s}.aegis_runs WHERE thread_id = $1)",
                ))
                .await
                .map_err(backend)?;
            let row = client
                .query_one(&statement, &[&thread_id, &answer])
                .await
                .map_err(backend)?;
            let updated: bool = row.try_get(0).map_err(backend)?;
            let state: Option<String> = row.try_get(1).map_err(backend)?;
            super::state_checked(updated, state, thread_id, |thread_id, state| {
                WorkerError::NotAwaitingInput { thread_id, state }
            })
        })
        .await
    }

    async fn requeue(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            // An unreadable answer is dropped: the run waits for a new one.
            // Anything else runs again from its rows.
            let statement = client
                .prepare_cached(&self.sql(
                    "WITH f AS (DELETE FROM {s}.aegis_run_faults WHERE thread_id = $1 \
                   AND EXISTS (SELECT 1 FROM {s}.aegis_runs WHERE thread_id = $1 \
                     AND state = 'quarantined') RETURNING kind), \
                 u AS (UPDATE {s}.aegis_runs SET error = NULL, queued_since = now(), \
                   state = CASE WHEN EXISTS (SELECT 1 FROM f WHERE kind = 'answer') \
                     THEN 'awaiting_input' ELSE 'queued' END, \
                   answer = CASE WHEN EXISTS (SELECT 1 FROM f WHERE kind = 'answer') \
                     THEN NULL ELSE answer END \
                   WHERE thread_id = $1 AND state = 'quarantined' RETURNING thread_id) \
                 SELECT EXISTS (SELECT 1 FROM u), \
                   (SELECT state FROM {s}.aegis_runs WHERE thread_id = $1)",
                ))
                .await
                .map_err(backend)?;
            let row = client
                .query_one(&statement, &[&thread_id])
                .await
                .map_err(backend)?;
            let requeued: bool = row.try_get(0).map_err(backend)?;
            let state: Option<String> = row.try_get(1).map_err(backend)?;
            super::state_checked(requeued, state, thread_id, |thread_id, state| {
                WorkerError::NotQuarantined { thread_id, state }
            })
        })
        .await
    }

    async fn stats(&self) -> Result<Option<QueueStats>, WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let mut stats = QueueStats::new();
            let runs = client
                .query(
                    &self.sql("SELECT state, count(*) FROM {s}.aegis_runs GROUP BY state"),
                    &[],
                )
                .await
                .map_err(backend)?;
            for row in &runs {
                let state: String = row.try_get(0).map_err(backend)?;
                let n: i64 = row.try_get(1).map_err(backend)?;
                if let Some(state) = RunState::parse(&state) {
                    stats = stats.with_runs(state, u64::try_from(n).unwrap_or(0));
                }
            }
            let claims = client
                .query(
                    &self.sql(
                        "SELECT outcome, count(*) FROM {s}.aegis_run_attempts GROUP BY outcome",
                    ),
                    &[],
                )
                .await
                .map_err(backend)?;
            for row in &claims {
                let outcome: String = row.try_get(0).map_err(backend)?;
                let n: i64 = row.try_get(1).map_err(backend)?;
                stats = stats.with_claims(&outcome, u64::try_from(n).unwrap_or(0));
            }
            let oldest: Option<i64> = client
                .query_one(
                    &self.sql(
                        "SELECT (EXTRACT(EPOCH FROM now() - min(queued_since)) * 1000)::BIGINT \
                         FROM {s}.aegis_runs WHERE state = 'queued'",
                    ),
                    &[],
                )
                .await
                .map_err(backend)?
                .try_get(0)
                .map_err(backend)?;
            if let Some(ms) = oldest {
                stats = stats.with_queued_age(Duration::from_millis(ms.max(0).unsigned_abs()));
            }
            Ok(Some(stats))
        })
        .await
    }

    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.within(self.statuses_where(
            "SELECT thread_id FROM {s}.aegis_runs WHERE state = 'quarantined' \
             ORDER BY queued_at LIMIT $1",
            &[&max],
        ))
        .await
    }

    async fn runs(
        &self,
        state: Option<RunState>,
        graph_name: Option<&str>,
        max: usize,
    ) -> Result<Vec<RunStatus>, WorkerError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let state = state.map(RunState::as_str);
        self.within(self.statuses_where(
            "SELECT thread_id FROM {s}.aegis_runs \
             WHERE ($1::TEXT IS NULL OR state = $1) \
             AND ($2::TEXT IS NULL OR graph_name = $2) \
             ORDER BY queued_at DESC LIMIT $3",
            &[&state, &graph_name, &max],
        ))
        .await
    }

    async fn retry_now(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            client
                .execute(
                    &self.sql(
                        "UPDATE {s}.aegis_run_faults SET not_before = NULL WHERE thread_id = $1",
                    ),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            // Touching the run's row fires the change trigger: idle workers
            // wake and claim it now rather than at their next poll.
            let n = client
                .execute(
                    &self.sql("UPDATE {s}.aegis_runs SET state = state WHERE thread_id = $1"),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            if n == 0 {
                return Err(WorkerError::UnknownThread {
                    thread_id: thread_id.to_string(),
                });
            }
            Ok(())
        })
        .await
    }

    async fn cancel(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let n = client
                .execute(
                    &self.sql(
                        "UPDATE {s}.aegis_runs SET \
                         state = CASE WHEN state IN ('queued', 'awaiting_input') THEN 'cancelled' ELSE state END, \
                         cancel_requested = cancel_requested OR state = 'running' \
                         WHERE thread_id = $1",
                    ),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            if n == 0 {
                return Err(WorkerError::UnknownThread {
                    thread_id: thread_id.to_string(),
                });
            }
            Ok(())
        })
            .await
    }

    async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&self.sql(
                    "SELECT graph_name, state, epoch, worker_id, fingerprint, error, \
                     (state = 'running' AND lease_expires_at <= now()) \
                     FROM {s}.aegis_runs WHERE thread_id = $1",
                ))
                .await
                .map_err(backend)?;
            let Some(row) = client
                .query_opt(&statement, &[&thread_id])
                .await
                .map_err(backend)?
            else {
                return Ok(None);
            };
            let graph_name: String = row.try_get(0).map_err(backend)?;
            let state: String = row.try_get(1).map_err(backend)?;
            let state = RunState::parse(&state).ok_or_else(|| {
                WorkerError::Store(StoreError::Backend(format!(
                    "postgres run queue: unknown run state {state:?}"
                )))
            })?;
            let fingerprint: Option<String> = row.try_get(4).map_err(backend)?;
            let expired: Option<bool> = row.try_get(6).map_err(backend)?;
            let epoch = epoch_from(row.try_get(2).map_err(backend)?);
            let waiting = if state == RunState::Queued || expired == Some(true) {
                let live = client
                    .query(
                        &self.sql(
                            "SELECT worker_id, graph_names, fingerprints, migrations \
                             FROM {s}.aegis_workers WHERE expires_at > now()",
                        ),
                        &[],
                    )
                    .await
                    .map_err(backend)?;
                let workers = live
                    .iter()
                    .map(|r| {
                        let names: Vec<String> = r.try_get(1).map_err(backend)?;
                        let fps: Vec<String> = r.try_get(2).map_err(backend)?;
                        let migrations: Option<Vec<String>> = r.try_get(3).map_err(backend)?;
                        let mut migrations = migrations.unwrap_or_default().into_iter();
                        Ok(WorkerInfo {
                            worker_id: r.try_get(0).map_err(backend)?,
                            graphs: names
                                .into_iter()
                                .zip(fps)
                                .map(|(name, fingerprint)| {
                                    GraphKey::new(name, fingerprint)
                                        .with_migrations(migrations.next().unwrap_or_default())
                                })
                                .collect(),
                        })
                    })
                    .collect::<Result<Vec<_>, WorkerError>>()?;
                let verdicts = self.verdicts_of(&client, thread_id, epoch).await?;
                waiting_reason(&graph_name, fingerprint.as_deref(), &workers, &verdicts)
            } else {
                None
            };
            let moved = client
                .query_opt(
                    &self.sql(
                        "SELECT from_fingerprint, migration FROM {s}.aegis_run_moves \
                         WHERE thread_id = $1 ORDER BY epoch DESC LIMIT 1",
                    ),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            let fault = client
                .query_opt(
                    &self
                        .sql("SELECT kind, message FROM {s}.aegis_run_faults WHERE thread_id = $1"),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            let fault = match fault {
                Some(r) => RunFault::parse(
                    &r.try_get::<_, String>(0).map_err(backend)?,
                    r.try_get::<_, String>(1).map_err(backend)?,
                ),
                None => None,
            };
            let (previous_fingerprint, migration) = match moved {
                Some(r) => (
                    Some(r.try_get::<_, String>(0).map_err(backend)?),
                    r.try_get::<_, Option<String>>(1).map_err(backend)?,
                ),
                None => (None, None),
            };
            Ok(Some(RunStatus {
                thread_id: thread_id.to_string(),
                graph_name,
                state,
                epoch,
                worker_id: row.try_get(3).map_err(backend)?,
                fingerprint,
                error: row.try_get(5).map_err(backend)?,
                waiting_reason: waiting,
                previous_fingerprint,
                migration,
                fault,
            }))
        })
        .await
    }

    async fn attempts(&self, thread_id: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        self.within(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    &self.sql(
                        "SELECT epoch, worker_id, outcome FROM {s}.aegis_run_attempts \
                     WHERE thread_id = $1 ORDER BY epoch",
                    ),
                    &[&thread_id],
                )
                .await
                .map_err(backend)?;
            rows.iter()
                .map(|r| {
                    Ok(AttemptInfo {
                        epoch: epoch_from(r.try_get(0).map_err(backend)?),
                        worker_id: r.try_get(1).map_err(backend)?,
                        outcome: r.try_get(2).map_err(backend)?,
                    })
                })
                .collect()
        })
        .await
    }

    async fn wait_for_change(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }
}
