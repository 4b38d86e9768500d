//! The effect ledger on SQLite (`aegis_effects`): each transition of the
//! ledger's state machine is one statement, fenced on a worker by the run
//! queue's lease row (`aegis_runs`, in the same file) in the same statement.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::sync::{Arc, Mutex};

use super::{Readers, backend, join_error};
use crate::error::StoreError;
use crate::graph::{EffectEntry, EffectLedger, EffectStart, EffectState};
use crate::id::validate_thread_id;

/// The lease an effect write is fenced by: the run queue's row of `key`
/// must still be running at `epoch`.
#[derive(Debug, Clone)]
pub(crate) struct SqliteEffectFence {
    pub(crate) key: String,
    pub(crate) epoch: i64,
}

/// Where the ledger's statements run: the store's connections, or the run
/// queue's own (whose table holds the fence).
pub(crate) enum LedgerConn {
    Store(Arc<Readers>),
    Queue(Arc<Mutex<Connection>>),
}

/// The ledger of a [`SqliteWaypointStore`](super::SqliteWaypointStore),
/// fenced or not.
pub(crate) struct SqliteEffectLedger {
    pub(crate) conn: LedgerConn,
    pub(crate) fence: Option<SqliteEffectFence>,
}

const COLUMNS: &str = "effect_key, thread_id, node_id, name, state, starts, result";

fn entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<(EffectEntry, String, i64)> {
    Ok((
        EffectEntry {
            key: row.get(0)?,
            thread_id: row.get(1)?,
            node_id: row.get(2)?,
            name: row.get(3)?,
            state: EffectState::Started,
            starts: 0,
            result: row
                .get::<_, Option<String>>(6)?
                .map(|r| serde_json::from_str(&r).unwrap_or(Value::Null)),
        },
        row.get(4)?,
        row.get(5)?,
    ))
}

fn checked((mut e, state, starts): (EffectEntry, String, i64)) -> Result<EffectEntry, StoreError> {
    e.state = EffectState::from_name(&state).ok_or_else(|| {
        StoreError::Backend(format!("sqlite: effect {}: unknown state `{state}`", e.key))
    })?;
    e.starts = u32::try_from(starts)
        .map_err(|_| StoreError::Backend(format!("sqlite: effect {}: {starts} starts", e.key)))?;
    Ok(e)
}

impl SqliteEffectLedger {
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, Option<&SqliteEffectFence>) -> Result<T, StoreError>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        let fence = self.fence.clone();
        match &self.conn {
            LedgerConn::Store(readers) => {
                let readers = readers.clone();
                tokio::task::spawn_blocking(move || readers.with(|c| f(c, fence.as_ref())))
                    .await
                    .map_err(join_error)?
            }
            LedgerConn::Queue(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
                    f(&conn, fence.as_ref())
                })
                .await
                .map_err(join_error)?
            }
        }
    }
}

/// Runs `sql` with `params` and, fenced, with the fence's condition (on
/// two more parameters) where `sql` says `{fence}`: one statement.
fn execute(
    conn: &Connection,
    fence: Option<&SqliteEffectFence>,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<usize, StoreError> {
    let mut all: Vec<&dyn rusqlite::ToSql> = params.to_vec();
    let cond = match fence {
        None => "1".to_string(),
        Some(f) => {
            all.push(&f.key);
            all.push(&f.epoch);
            format!(
                "EXISTS (SELECT 1 FROM aegis_runs WHERE thread_id = ?{} AND epoch = ?{} AND state = 'running')",
                params.len() + 1,
                params.len() + 2
            )
        }
    };
    conn.prepare_cached(&sql.replace("{fence}", &cond))
        .map_err(backend)?
        .execute(all.as_slice())
        .map_err(backend)
}

/// `LeaseLost` unless the fence still holds.
fn check_fence(conn: &Connection, fence: Option<&SqliteEffectFence>) -> Result<(), StoreError> {
    let Some(f) = fence else { return Ok(()) };
    let current: Option<(i64, String)> = conn
        .query_row(
            "SELECT epoch, state FROM aegis_runs WHERE thread_id = ?1",
            params![f.key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(backend)?;
    match current {
        Some((epoch, state)) if epoch == f.epoch && state == "running" => Ok(()),
        other => Err(StoreError::LeaseLost {
            thread_id: f.key.clone(),
            epoch: u64::try_from(f.epoch).unwrap_or(0),
            current: other.and_then(|(e, _)| u64::try_from(e).ok()).unwrap_or(0),
        }),
    }
}

fn get(conn: &Connection, key: &str) -> Result<Option<EffectEntry>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM aegis_effects WHERE effect_key = ?1"
    ))
    .map_err(backend)?
    .query_row(params![key], entry)
    .optional()
    .map_err(backend)?
    .map(checked)
    .transpose()
}

fn update(
    conn: &Connection,
    fence: Option<&SqliteEffectFence>,
    set: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE aegis_effects SET {set} WHERE effect_key = ?1 AND state = 'started' AND {{fence}}"
    );
    if execute(conn, fence, &sql, params)? == 0 {
        // Done already (nothing to do), or fenced off.
        check_fence(conn, fence)?;
    }
    Ok(())
}

#[async_trait]
impl EffectLedger for SqliteEffectLedger {
    async fn begin(&self, start: &EffectStart) -> Result<Option<EffectEntry>, StoreError> {
        validate_thread_id(&start.thread_id).map_err(StoreError::InvalidThreadId)?;
        let start = start.clone();
        self.with(move |conn, fence| {
            let sql = format!(
                "INSERT INTO aegis_effects ({COLUMNS}) \
                 SELECT ?1, ?2, ?3, ?4, 'started', 1, NULL WHERE {{fence}} \
                 ON CONFLICT (effect_key) DO NOTHING"
            );
            let n = execute(
                conn,
                fence,
                &sql,
                &[&start.key, &start.thread_id, &start.node_id, &start.name],
            )?;
            if n == 1 {
                return Ok(None);
            }
            match get(conn, &start.key)? {
                Some(e) => Ok(Some(e)),
                None => {
                    check_fence(conn, fence)?;
                    Err(StoreError::Backend(format!(
                        "sqlite: effect {} was neither started nor found",
                        start.key
                    )))
                }
            }
        })
        .await
    }

    async fn restart(&self, key: &str) -> Result<(), StoreError> {
        let key = key.to_string();
        self.with(move |conn, fence| update(conn, fence, "starts = starts + 1", &[&key]))
            .await
    }

    async fn finish(&self, key: &str, result: &Value) -> Result<(), StoreError> {
        let (key, result) = (key.to_string(), result.to_string());
        self.with(move |conn, fence| {
            update(conn, fence, "state = 'done', result = ?2", &[&key, &result])
        })
        .await
    }

    async fn entries(&self, thread_id: &str) -> Result<Vec<EffectEntry>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let thread = thread_id.to_string();
        self.with(move |conn, _| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM aegis_effects WHERE thread_id = ?1 ORDER BY effect_key"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map(params![thread], entry).map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(checked(row.map_err(backend)?)?);
            }
            Ok(out)
        })
        .await
    }
}
