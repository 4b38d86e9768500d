//! [`PostgresWaypointStore`]: waypoints in PostgreSQL, shared by several
//! engine processes.

mod pool;
mod schema;

use async_trait::async_trait;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use tokio_postgres::error::SqlState;

use super::codec::{self, ChainDecoder, SnapshotRule};
use super::tips::TipCache;
use super::{StoreError, Waypoint, WaypointRowStats, WaypointStore};
use pool::Pool;

pub use schema::POSTGRES_SCHEMA_VERSION;

fn backend(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(format!("postgres: {e}"))
}

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
    /// The most connections the store opens (default 8).
    pub pool_size: usize,
    /// The most delta rows between two full snapshots of a thread's state
    /// (default 256); a snapshot also comes sooner once the deltas since the
    /// last one outweigh it.
    pub max_delta_chain: u32,
    /// How many threads' last state is kept in memory to encode the next
    /// waypoint as a delta (default 1,024); a thread not kept gets a
    /// snapshot.
    pub tip_cache_threads: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "public".to_string(),
            pool_size: 8,
            max_delta_chain: 256,
            tip_cache_threads: 1_024,
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
/// shows the sizes. Connections are plain TCP (no TLS). Thread ids are
/// PostgreSQL `TEXT`, so one containing a NUL character is refused by the
/// server (as a [`StoreError::Backend`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), aegis_runtime::StoreError> {
/// use aegis_runtime::{PostgresWaypointStore, UnconfiguredPaladinPort, WarEngine};
/// use std::sync::Arc;
///
/// let store = PostgresWaypointStore::connect("host=127.0.0.1 user=postgres dbname=app").await?;
/// let engine = WarEngine::new(Arc::new(UnconfiguredPaladinPort), Arc::new(store));
/// # let _ = engine; Ok(()) }
/// ```
pub struct PostgresWaypointStore {
    pool: Pool,
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
        let config = tokio_postgres::Config::from_str(connection).map_err(|e| {
            StoreError::Backend(format!("postgres: invalid connection string: {e}"))
        })?;
        let quoted = schema::quote_schema(&options.schema)?;
        let mut client = pool::connect(&config).await?;
        schema::prepare(&mut client, &options.schema).await?;
        let pool = Pool::new(config, quoted, options.pool_size);
        pool.adopt(client).await?;
        Ok(PostgresWaypointStore {
            pool,
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
        let conn = self.pool.get().await?;
        let rows = conn
            .client
            .query(&conn.statements.row_stats, &[&thread_id])
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
        let row = conn
            .client
            .query_opt(&conn.statements.next_seq, &[&thread_id])
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
        let rows = {
            let conn = self.pool.get().await?;
            let statement = if latest {
                &conn.statements.latest
            } else {
                &conn.statements.history
            };
            conn.client
                .query(statement, &[&thread_id])
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

#[async_trait]
impl WaypointStore for PostgresWaypointStore {
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        let thread_id = waypoint.thread_id.clone();
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
            let s = &conn.statements;
            let result = if seq == 0 {
                conn.client
                    .execute(
                        &s.put_first,
                        &[
                            &thread_id,
                            &superstep,
                            &status,
                            &created_at_ms,
                            &row.payload,
                        ],
                    )
                    .await
            } else {
                conn.client
                    .execute(
                        &s.put_next,
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
        let actual_next = self.next_seq(&thread_id).await?;
        Err(StoreError::Conflict {
            thread_id,
            expected_seq: seq,
            actual_next,
        })
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        Ok(self.decode(thread_id, true, false).await?.pop())
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        self.decode(thread_id, false, true).await
    }
}

#[cfg(test)]
mod tests;
