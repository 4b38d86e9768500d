//! [`SqliteWaypointStore`]: durable waypoints in one embedded SQLite file.

mod effects;
mod schema;
mod writer;

use async_trait::async_trait;
use rusqlite::Connection;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use super::codec::{ChainDecoder, SnapshotRule};
use super::tips::TipCache;
use super::{Waypoint, WaypointRowStats, WaypointStore};
use crate::error::StoreError;
use crate::graph::EffectLedger;
use crate::id::validate_thread_id;

pub(crate) use effects::SqliteEffectFence;
pub use schema::SQLITE_SCHEMA_VERSION;

/// How hard SQLite works to make each committed waypoint survive a crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqliteSynchronous {
    /// Every commit is flushed to disk before `put` returns: a waypoint
    /// survives a power loss or an OS crash. The default.
    #[default]
    Full,
    /// Commits are flushed at WAL checkpoints: a waypoint survives the
    /// process being killed, but the last ones may be lost (never
    /// corrupted) if the machine loses power. Faster.
    Normal,
}

impl SqliteSynchronous {
    fn pragma(self) -> &'static str {
        match self {
            SqliteSynchronous::Full => "FULL",
            SqliteSynchronous::Normal => "NORMAL",
        }
    }
}

/// How a [`SqliteWaypointStore`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Durability of each commit (default [`SqliteSynchronous::Full`]).
    pub synchronous: SqliteSynchronous,
    /// How long a write waits for another process holding the file's write
    /// lock before failing (default 5 s).
    pub busy_timeout: Duration,
    /// The most delta rows between two full snapshots of a thread's state
    /// (default 256); a snapshot also comes sooner once the deltas since the
    /// last one outweigh it.
    pub max_delta_chain: u32,
    /// How many threads' last state is kept in memory to encode the next
    /// waypoint as a delta (default 1,024); a thread not kept gets a
    /// snapshot.
    pub tip_cache_threads: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: SqliteSynchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_delta_chain: 256,
            tip_cache_threads: 1_024,
        }
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::synchronous`].
    pub fn with_synchronous(mut self, synchronous: SqliteSynchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets [`SqliteOptions::busy_timeout`].
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets [`SqliteOptions::max_delta_chain`] (at least 1).
    pub fn with_max_delta_chain(mut self, rows: u32) -> Self {
        self.max_delta_chain = rows.max(1);
        self
    }

    /// Sets [`SqliteOptions::tip_cache_threads`].
    pub fn with_tip_cache_threads(mut self, threads: usize) -> Self {
        self.tip_cache_threads = threads;
        self
    }
}

/// Waypoints in one SQLite file (WAL mode), for a single machine: runs
/// survive the process, and several processes may share the file.
///
/// Every write is one transaction, conditional on the thread's last
/// waypoint (see [`WaypointStore`]); the loser of a race gets
/// [`StoreError::Conflict`] and writes nothing. Writes go to a dedicated
/// connection thread, which commits writes that arrive together in one
/// transaction (each still all-or-nothing on its own); reads run on
/// blocking threads. Nothing blocks the async runtime.
///
/// A row stores what its superstep changed, with a full snapshot now and
/// then (see [`SqliteOptions::max_delta_chain`]); [`Self::row_stats`] shows
/// the sizes.
///
/// ```no_run
/// # async fn demo() -> Result<(), aegis_runtime::error::StoreError> {
/// use aegis_runtime::{engine::WarEngine, waypoint::SqliteWaypointStore};
/// use std::sync::Arc;
///
/// let store = Arc::new(SqliteWaypointStore::open("waypoints.sqlite").await?);
/// let engine = WarEngine::new(store);
/// # let _ = engine; Ok(()) }
/// ```
pub struct SqliteWaypointStore {
    path: PathBuf,
    options: SqliteOptions,
    writer: mpsc::UnboundedSender<writer::WriteJob>,
    readers: Arc<Readers>,
    tips: Arc<TipCache>,
}

impl fmt::Debug for SqliteWaypointStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteWaypointStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("sqlite: {e}"))
}

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Backend(format!("sqlite: a blocking task failed: {e}"))
}

fn seq_from_sql(thread_id: &str, seq: i64) -> Result<u64, StoreError> {
    u64::try_from(seq).map_err(|_| StoreError::Corrupt {
        thread_id: thread_id.to_string(),
        seq: 0,
        message: format!("negative sequence number {seq}"),
    })
}

fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Backend(format!("sqlite: cannot open {}: {e}", path.display())))?;
    conn.busy_timeout(options.busy_timeout).map_err(backend)?;
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(backend)?;
    Ok(conn)
}

/// Idle read connections; WAL lets them read while the writer writes.
struct Readers {
    path: PathBuf,
    options: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
}

const MAX_IDLE_READERS: usize = 8;

impl Readers {
    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => open_connection(&self.path, &self.options)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

const LATEST_SQL: &str = "SELECT w.seq, w.payload FROM aegis_waypoints w \
     JOIN aegis_threads t ON t.thread_id = w.thread_id \
     WHERE t.thread_id = ?1 AND w.seq >= t.snapshot_seq ORDER BY w.seq";
const HISTORY_SQL: &str =
    "SELECT seq, payload FROM aegis_waypoints WHERE thread_id = ?1 ORDER BY seq";
const ROW_STATS_SQL: &str = "SELECT seq, is_snapshot, length(payload) FROM aegis_waypoints \
     WHERE thread_id = ?1 ORDER BY seq";

impl SqliteWaypointStore {
    /// Opens (creating if needed) the store at `path` with default options.
    ///
    /// Creates or migrates the schema; a file written by a newer aegis is
    /// [`StoreError::SchemaTooNew`] and is left untouched.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens (creating if needed) the store at `path` with `options`.
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let (conn, path, options) = tokio::task::spawn_blocking(move || {
            let mut conn = open_connection(&path, &options)?;
            schema::prepare(&mut conn)?;
            Ok::<_, StoreError>((conn, path, options))
        })
        .await
        .map_err(join_error)??;
        let tips = Arc::new(TipCache::new(options.tip_cache_threads));
        let rule = SnapshotRule {
            max_chain: options.max_delta_chain.max(1),
        };
        let writer = writer::spawn(conn, tips.clone(), rule)?;
        let readers = Arc::new(Readers {
            path: path.clone(),
            options: options.clone(),
            idle: Mutex::new(Vec::new()),
        });
        Ok(SqliteWaypointStore {
            path,
            options,
            writer,
            readers,
            tips,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored size of every row of `thread_id`, oldest first.
    pub async fn row_stats(&self, thread_id: &str) -> Result<Vec<WaypointRowStats>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let thread = thread_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(ROW_STATS_SQL).map_err(backend)?;
            let rows = stmt
                .query_map([&thread], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, bool>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(backend)?;
            let mut stats = Vec::new();
            for row in rows {
                let (seq, snapshot, bytes) = row.map_err(backend)?;
                stats.push(WaypointRowStats {
                    seq: seq_from_sql(&thread, seq)?,
                    snapshot,
                    payload_bytes: u64::try_from(bytes).unwrap_or(0),
                });
            }
            Ok(stats)
        })
        .await
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || readers.with(f))
            .await
            .map_err(join_error)?
    }

    /// Decodes the rows `sql` selects for `thread_id`, returning every
    /// waypoint (`all`) or only the last.
    async fn decode(
        &self,
        thread_id: &str,
        sql: &'static str,
        all: bool,
    ) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let thread = thread_id.to_string();
        let tips = self.tips.clone();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
            let rows = stmt
                .query_map([&thread], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(backend)?;
            let mut decoder = ChainDecoder::new(&thread);
            let mut out = Vec::new();
            for row in rows {
                let (seq, payload) = row.map_err(backend)?;
                let waypoint = decoder.push(seq_from_sql(&thread, seq)?, &payload)?;
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
    }
}

/// The effect ledger of a run queue's file, on its connection, every
/// write fenced by `fence` (a worker's lease).
pub(crate) fn fenced_effects(
    conn: Arc<Mutex<Connection>>,
    fence: SqliteEffectFence,
) -> Arc<dyn EffectLedger> {
    Arc::new(effects::SqliteEffectLedger {
        conn: effects::LedgerConn::Queue(conn),
        fence: Some(fence),
    })
}

#[async_trait]
impl WaypointStore for SqliteWaypointStore {
    fn effect_ledger(&self) -> Option<Arc<dyn EffectLedger>> {
        Some(Arc::new(effects::SqliteEffectLedger {
            conn: effects::LedgerConn::Store(self.readers.clone()),
            fence: None,
        }))
    }

    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        validate_thread_id(&waypoint.thread_id).map_err(StoreError::InvalidThreadId)?;
        let (reply, done) = oneshot::channel();
        self.writer
            .send(writer::WriteJob { waypoint, reply })
            .map_err(|_| writer::stopped())?;
        done.await.map_err(|_| writer::stopped())?
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        Ok(self.decode(thread_id, LATEST_SQL, false).await?.pop())
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        self.decode(thread_id, HISTORY_SQL, true).await
    }
}

#[cfg(test)]
mod tests;
