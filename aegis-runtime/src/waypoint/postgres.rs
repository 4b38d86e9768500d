//! [`PostgresWaypointStore`]: waypoints in PostgreSQL, shared by several
//! engine processes.

mod effects;
pub(crate) mod error;
mod pool;
pub(crate) mod schema;
mod statements;
mod tls;

use async_trait::async_trait;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;

use super::codec::{self, ChainDecoder, SnapshotRule};
use super::tips::TipCache;
use super::{Waypoint, WaypointRowStats, WaypointStore};
use crate::error::StoreError;
use crate::graph::EffectLedger;
use crate::id::validate_thread_id;
pub(crate) use effects::PgEffectFence;
use error::backend;
pub(crate) use pool::PgPool;
use statements::Statements;

pub use schema::POSTGRES_SCHEMA_VERSION;

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Backend(format!("postgres: a blocking task failed: {e}"))
}

/// How a [`PostgresWaypointStore`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema holding the store's tables, created if missing (default
    /// `public`): a plain identifier of ASCII letters, digits and `_`.
    pub schema: String,
    /// The most connections the store opens (default 8): the
    /// `deadpool-postgres` pool's `max_size`. Connections open on demand; a
    /// query waits while all are in use, up to `call_timeout`.
    pub pool_size: usize,
    /// The most delta rows between two full snapshots of a thread's state
    /// (default 256); a snapshot also comes sooner once the deltas since the
    /// last one outweigh it.
    pub max_delta_chain: u32,
    /// How many threads' last state is kept in memory to encode the next
    /// waypoint as a delta (default 1,024); a thread not kept gets a
    /// snapshot.
    pub tip_cache_threads: usize,
    /// The longest any one call waits (default 30 s): getting a connection,
    /// each store or queue operation, and, unless the connection string
    /// sets them, `connect_timeout` and `tcp_user_timeout` on the socket.
    /// A call past it fails with [`StoreError::Backend`], so a connection
    /// that went dark never hangs a caller.
    pub call_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "public".to_string(),
            pool_size: 8,
            max_delta_chain: 256,
            tip_cache_threads: 1_024,
            call_timeout: Duration::from_secs(30),
        }
    }
}

impl PostgresOptions {
    /// Sets [`PostgresOptions::schema`].
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets [`PostgresOptions::pool_size`] (at least 1).
    pub fn with_pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections.max(1);
        self
    }

    /// Sets [`PostgresOptions::max_delta_chain`] (at least 1).
    pub fn with_max_delta_chain(mut self, rows: u32) -> Self {
        self.max_delta_chain = rows.max(1);
        self
    }

    /// Sets [`PostgresOptions::tip_cache_threads`].
    pub fn with_tip_cache_threads(mut self, threads: usize) -> Self {
        self.tip_cache_threads = threads;
        self
    }

    /// Sets [`PostgresOptions::call_timeout`] (at least 1 ms).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout.max(Duration::from_millis(1));
        self
    }
}

/// Waypoints in PostgreSQL: several engine processes share one store, and
/// any of them can resume any thread.
///
/// Every write is one statement (so one transaction), conditional on the
/// thread's last waypoint (see [`WaypointStore`]); of two engines advancing
/// one thread, the loser gets [`StoreError::Conflict`] and writes nothing.
/// The schema is created or migrated on connect; a schema written by a newer
/// aegis is [`StoreError::SchemaTooNew`] and is left untouched.
///
/// A row stores what its superstep changed, with a full snapshot now and
/// then (see [`PostgresOptions::max_delta_chain`]); [`Self::row_stats`]
/// shows the sizes. Connections use TLS (rustls) as the string's `sslmode`
/// asks: `require`, `verify-ca` or `verify-full` as in libpq. Thread ids are
/// PostgreSQL `TEXT` (the database should be UTF-8 encoded, as `createdb`
/// makes it by default); an id no store can hold (a NUL, more than
/// [`MAX_THREAD_ID_BYTES`](crate::id::MAX_THREAD_ID_BYTES) bytes, empty) is
/// refused before any query, as [`StoreError::InvalidThreadId`], exactly as
/// on the other stores.
///
/// ```no_run
/// # async fn demo() -> Result<(), aegis_runtime::error::StoreError> {
/// use aegis_runtime::{engine::WarEngine, waypoint::PostgresWaypointStore};
/// use std::sync::Arc;
///
/// let store = PostgresWaypointStore::connect("host=127.0.0.1 user=postgres dbname=app").await?;
/// let engine = WarEngine::new(store);
/// # let _ = engine; Ok(()) }
/// ```
pub struct PostgresWaypointStore {
    pool: PgPool,
    statements: Statements,
    options: PostgresOptions,
    tips: Arc<TipCache>,
    rule: SnapshotRule,
}

impl fmt::Debug for PostgresWaypointStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may carry a password: never shown.
        f.debug_struct("PostgresWaypointStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PostgresWaypointStore {
    /// Connects with default options. `connection` is a libpq-style string
    /// (`host=... user=... dbname=...`) or a `postgresql://` URL.
    pub async fn connect(connection: &str) -> Result<Self, StoreError> {
        Self::connect_with(connection, PostgresOptions::default()).await
    }

    /// Connects with `options`, creating or migrating the schema.
    pub async fn connect_with(
        connection: &str,
        options: PostgresOptions,
    ) -> Result<Self, StoreError> {
        let (config, tls) = parse_connection(connection)?;
        let quoted = schema::quote_schema(&options.schema)?;
        let pool = PgPool::new(config, tls, options.pool_size, options.call_timeout)?;
        {
            // The first connection: a bad server or schema fails here.
            let mut client = pool.get().await?;
            schema::prepare(&mut client, &options.schema).await?;
        }
        Ok(PostgresWaypointStore {
            pool,
            statements: Statements::new(quoted),
            tips: Arc::new(TipCache::new(options.tip_cache_threads)),
            rule: SnapshotRule {
                max_chain: options.max_delta_chain.max(1),
            },
            options,
        })
    }

    /// The schema holding the store's tables.
    pub fn schema(&self) -> &str {
        &self.options.schema
    }

    /// The stored size of every row of `thread_id`, oldest first.
    pub async fn row_stats(&self, thread_id: &str) -> Result<Vec<WaypointRowStats>, StoreError> {
        self.pool.within(self.row_stats_now(thread_id)).await
    }

    async fn row_stats_now(&self, thread_id: &str) -> Result<Vec<WaypointRowStats>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let conn = self.pool.get().await?;
        let statement = self.statements.row_stats.on(&conn).await.map_err(backend)?;
        let rows = conn
            .query(&statement, &[&thread_id])
            .await
            .map_err(backend)?;
        rows.iter()
            .map(|r| {
                Ok(WaypointRowStats {
                    seq: seq_from_sql(thread_id, r.try_get(0).map_err(backend)?)?,
                    snapshot: r.try_get(1).map_err(backend)?,
                    payload_bytes: u64::try_from(r.try_get::<_, i64>(2).map_err(backend)?)
                        .unwrap_or(0),
                })
            })
            .collect()
    }

    async fn next_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        let conn = self.pool.get().await?;
        let statement = self.statements.next_seq.on(&conn).await.map_err(backend)?;
        let row = conn
            .query_opt(&statement, &[&thread_id])
            .await
            .map_err(backend)?;
        match row {
            None => Ok(0),
            Some(r) => seq_from_sql(thread_id, r.try_get(0).map_err(backend)?),
        }
    }

    /// Decodes the rows of `thread_id` that `latest` (or else `history`)
    /// selects, returning every waypoint (`all`) or only the last.
    async fn decode(
        &self,
        thread_id: &str,
        latest: bool,
        all: bool,
    ) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let rows = {
            let conn = self.pool.get().await?;
            let sql = if latest {
                &self.statements.latest
            } else {
                &self.statements.history
            };
            let statement = sql.on(&conn).await.map_err(backend)?;
            conn.query(&statement, &[&thread_id])
                .await
                .map_err(backend)?
        };
        let thread = thread_id.to_string();
        let tips = self.tips.clone();
        tokio::task::spawn_blocking(move || {
            let mut decoder = ChainDecoder::new(&thread);
            let mut out = Vec::new();
            for row in rows {
                let seq = seq_from_sql(&thread, row.try_get(0).map_err(backend)?)?;
                let payload: &[u8] = row.try_get(1).map_err(backend)?;
                let waypoint = decoder.push(seq, payload)?;
                if !all {
                    out.clear();
                }
                out.push(waypoint);
            }
            if let Some(tip) = decoder.into_tip() {
                tips.offer(&thread, tip);
            }
            Ok(out)
        })
        .await
        .map_err(join_error)?
    }
}

/// A connection string's configuration and the TLS connector its
/// `sslmode` asks for (see [`tls`]).
pub(crate) fn parse_connection(
    connection: &str,
) -> Result<
    (
        tokio_postgres::Config,
        Option<tokio_postgres_rustls::MakeRustlsConnect>,
    ),
    StoreError,
> {
    let (rewritten, verify) = tls::split_sslmode(connection);
    let config = tokio_postgres::Config::from_str(&rewritten)
        .map_err(|e| error::invalid_connection_string(connection, &e))?;
    let tls = pool::tls_for(&config, verify)?;
    Ok((config, tls))
}

/// A rustls connector that checks nothing (used where `sslmode=disable`
/// means it is never invoked, but a connector type is required).
pub(crate) fn tls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    tls::connector(tls::Verify::None)
}

fn seq_from_sql(thread_id: &str, seq: i64) -> Result<u64, StoreError> {
    u64::try_from(seq).map_err(|_| StoreError::Corrupt {
        thread_id: thread_id.to_string(),
        seq: 0,
        message: format!("negative sequence number {seq}"),
    })
}

fn to_sql(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("postgres: {n} exceeds BIGINT")))
}

/// A fenced write's condition (see [`PostgresWaypointStore::put_fenced`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgFence<'a> {
    /// The table holding the fence, in the store's schema.
    pub(crate) table: &'a str,
    /// The row of `table` (its `thread_id`).
    pub(crate) key: &'a str,
    /// The `epoch` the row must still hold.
    pub(crate) epoch: i64,
}

impl PostgresWaypointStore {
    /// [`WaypointStore::put`], conditional also on `fence`: the row
    /// `fence.key` of `fence.table` must still hold `fence.epoch`. The check
    /// and the write are one statement, and the fence row is read `FOR
    /// SHARE`, so a concurrent claim that bumps the epoch either waits for
    /// this write or makes it write nothing ([`StoreError::LeaseLost`]).
    pub(crate) async fn put_fenced(
        &self,
        waypoint: Waypoint,
        fence: PgFence<'_>,
    ) -> Result<(), StoreError> {
        self.pool.within(self.put_with(waypoint, Some(fence))).await
    }

    async fn put_with(
        &self,
        waypoint: Waypoint,
        fence: Option<PgFence<'_>>,
    ) -> Result<(), StoreError> {
        validate_thread_id(&waypoint.thread_id).map_err(StoreError::InvalidThreadId)?;
        let thread_id = waypoint.thread_id.to_string();
        let seq = waypoint.seq;
        let seq_sql = to_sql(seq)?;
        let superstep = i64::from(waypoint.superstep);
        let status = waypoint.status.name();
        let created_at_ms = codec::unix_millis(waypoint.created_at);
        // The tip is read before the write, but it is only ever a committed
        // row `seq - 1`, and the write succeeds only while that row is the
        // thread's last: the delta's base is exactly what the store holds.
        let base = self.tips.base_for(&thread_id, seq);
        let rule = self.rule;
        let row = tokio::task::spawn_blocking(move || codec::encode(waypoint, base.as_ref(), rule))
            .await
            .map_err(join_error)??;
        let written = {
            let conn = self.pool.get().await?;
            let s = &self.statements;
            let result = if let Some(fence) = fence {
                self.execute_fenced(
                    &conn,
                    fence,
                    &thread_id,
                    seq_sql,
                    superstep,
                    status,
                    &row,
                    created_at_ms,
                )
                .await
            } else if seq == 0 {
                match s.put_first.on(&conn).await {
                    Ok(statement) => {
                        conn.execute(
                            &statement,
                            &[
                                &thread_id,
                                &superstep,
                                &status,
                                &created_at_ms,
                                &row.payload,
                            ],
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            } else {
                match s.put_next.on(&conn).await {
                    Ok(statement) => {
                        conn.execute(
                            &statement,
                            &[
                                &thread_id,
                                &seq_sql,
                                &superstep,
                                &status,
                                &row.snapshot,
                                &created_at_ms,
                                &row.payload,
                            ],
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            };
            match result {
                Ok(n) => n,
                // The seq check makes this unreachable for this writer; the
                // unique key still guards the table against any other.
                Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => 0,
                Err(e) => return Err(backend(e)),
            }
        };
        if written == 1 {
            self.tips.offer(&thread_id, row.tip);
            return Ok(());
        }
        if let Some(fence) = fence {
            let current = self.fence_epoch(fence).await?;
            if current != Some(fence.epoch) {
                return Err(StoreError::LeaseLost {
                    thread_id: fence.key.to_string(),
                    epoch: u64::try_from(fence.epoch).unwrap_or(0),
                    current: current.and_then(|c| u64::try_from(c).ok()).unwrap_or(0),
                });
            }
        }
        let actual_next = self.next_seq(&thread_id).await?;
        Err(StoreError::Conflict {
            thread_id,
            expected_seq: seq,
            actual_next,
        })
    }

    /// The fenced twin of `put_first` / `put_next`: the same statement with
    /// the fence row locked `FOR SHARE` in a CTE every branch depends on.
    #[allow(clippy::too_many_arguments)]
    async fn execute_fenced(
        &self,
        conn: &deadpool_postgres::Object,
        fence: PgFence<'_>,
        thread_id: &str,
        seq: i64,
        superstep: i64,
        status: &str,
        row: &codec::EncodedRow,
        created_at_ms: i64,
    ) -> Result<u64, tokio_postgres::Error> {
        let s = &self.statements.quoted_schema;
        let table = fence.table;
        let columns = pool::WAYPOINT_COLUMNS;
        let fenced = format!(
            "f AS (SELECT 1 FROM {s}.{table} WHERE thread_id = $8::TEXT AND epoch = $9::BIGINT FOR SHARE)"
        );
        let sql = if seq == 0 {
            format!(
                "WITH {fenced}, t AS (INSERT INTO {s}.aegis_threads (thread_id, next_seq, snapshot_seq) \
                 SELECT $1::TEXT, 1, 0 WHERE EXISTS (SELECT 1 FROM f) AND $2::BIGINT = 0 \
                 ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id) \
                 INSERT INTO {s}.aegis_waypoints {columns} \
                 SELECT thread_id, 0, $3::BIGINT, $4::TEXT, $5::BOOLEAN, $6::BIGINT, $7::BYTEA FROM t"
            )
        } else {
            format!(
                "WITH {fenced}, t AS (UPDATE {s}.aegis_threads SET next_seq = $2::BIGINT + 1, \
                 snapshot_seq = CASE WHEN $5::BOOLEAN THEN $2::BIGINT ELSE snapshot_seq END \
                 WHERE thread_id = $1::TEXT AND next_seq = $2::BIGINT AND EXISTS (SELECT 1 FROM f) \
                 RETURNING thread_id) \
                 INSERT INTO {s}.aegis_waypoints {columns} \
                 SELECT thread_id, $2::BIGINT, $3::BIGINT, $4::TEXT, $5::BOOLEAN, $6::BIGINT, $7::BYTEA FROM t"
            )
        };
        // A thread's first row is always a snapshot (as `put_first` writes it).
        let snapshot = seq == 0 || row.snapshot;
        conn.execute(
            sql.as_str(),
            &[
                &thread_id,
                &seq,
                &superstep,
                &status,
                &snapshot,
                &created_at_ms,
                &row.payload,
                &fence.key,
                &fence.epoch,
            ],
        )
        .await
    }

    async fn fence_epoch(&self, fence: PgFence<'_>) -> Result<Option<i64>, StoreError> {
        let conn = self.pool.get().await?;
        let s = &self.statements.quoted_schema;
        let row = conn
            .query_opt(
                &format!("SELECT epoch FROM {s}.{} WHERE thread_id = $1", fence.table),
                &[&fence.key],
            )
            .await
            .map_err(backend)?;
        row.map(|r| r.try_get::<_, i64>(0).map_err(backend))
            .transpose()
    }
}

impl PostgresWaypointStore {
    fn ledger(&self, fence: Option<PgEffectFence>) -> Arc<dyn EffectLedger> {
        Arc::new(effects::PgEffectLedger {
            pool: self.pool.clone(),
            quoted: self.statements.quoted_schema.clone(),
            fence,
        })
    }

    /// The effect ledger, every write fenced by `fence` (a worker's lease).
    pub(crate) fn fenced_effects(&self, fence: PgEffectFence) -> Arc<dyn EffectLedger> {
        self.ledger(Some(fence))
    }
}

#[async_trait]
impl WaypointStore for PostgresWaypointStore {
    fn effect_ledger(&self) -> Option<Arc<dyn EffectLedger>> {
        Some(self.ledger(None))
    }

    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        self.pool.within(self.put_with(waypoint, None)).await
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        let mut found = self
            .pool
            .within(self.decode(thread_id, true, false))
            .await?;
        Ok(found.pop())
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        self.pool.within(self.decode(thread_id, false, true)).await
    }
}

#[cfg(test)]
mod tests;
