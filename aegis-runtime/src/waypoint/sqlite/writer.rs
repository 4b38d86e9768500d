//! The dedicated writer thread: owns the write connection and commits the
//! writes that queue up while it is busy in one transaction (a group commit),
//! each write in its own savepoint so it stays all-or-nothing on its own.

use rusqlite::{Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

use super::{backend, seq_from_sql};
use crate::error::StoreError;
use crate::waypoint::Waypoint;
use crate::waypoint::codec::{self, SnapshotRule};
use crate::waypoint::tips::{Tip, TipCache};

/// The most writes one transaction commits.
const MAX_BATCH: usize = 256;

/// One `put`, and where its result goes.
pub(super) struct WriteJob {
    pub(super) waypoint: Waypoint,
    pub(super) reply: oneshot::Sender<Result<(), StoreError>>,
}

pub(super) fn stopped() -> StoreError {
    StoreError::Backend("sqlite: the store's writer thread has stopped".to_string())
}

/// Starts the writer thread; it ends when every sender is dropped.
pub(super) fn spawn(
    conn: Connection,
    tips: Arc<TipCache>,
    rule: SnapshotRule,
) -> Result<mpsc::UnboundedSender<WriteJob>, StoreError> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("aegis-sqlite-writer".to_string())
        .spawn(move || run(conn, rx, &tips, rule))
        .map_err(|e| StoreError::Backend(format!("sqlite: cannot start the writer thread: {e}")))?;
    Ok(tx)
}

fn run(
    mut conn: Connection,
    mut jobs: mpsc::UnboundedReceiver<WriteJob>,
    tips: &TipCache,
    rule: SnapshotRule,
) {
    while let Some(first) = jobs.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        write_batch(&mut conn, batch, tips, rule);
    }
}

fn write_batch(conn: &mut Connection, batch: Vec<WriteJob>, tips: &TipCache, rule: SnapshotRule) {
    let (waypoints, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|j| (j.waypoint, j.reply)).unzip();
    let mut staged: HashMap<String, Tip> = HashMap::new();
    let results = match write_all(conn, waypoints, &mut staged, tips, rule) {
        Ok(results) => {
            // Only committed rows may serve as delta bases.
            for (thread_id, tip) in staged {
                tips.offer(&thread_id, tip);
            }
            results
        }
        Err(e) => replies.iter().map(|_| Err(e.clone())).collect(),
    };
    for (reply, result) in replies.into_iter().zip(results) {
        // The caller may have stopped waiting; the write stands regardless.
        let _ = reply.send(result);
    }
}

fn write_all(
    conn: &mut Connection,
    waypoints: Vec<Waypoint>,
    staged: &mut HashMap<String, Tip>,
    tips: &TipCache,
    rule: SnapshotRule,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let mut tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let results = waypoints
        .into_iter()
        .map(|w| write_one(&mut tx, w, staged, tips, rule))
        .collect();
    tx.commit().map_err(backend)?;
    Ok(results)
}

fn to_sql(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("sqlite: {n} exceeds i64")))
}

fn write_one(
    tx: &mut Transaction<'_>,
    waypoint: Waypoint,
    staged: &mut HashMap<String, Tip>,
    tips: &TipCache,
    rule: SnapshotRule,
) -> Result<(), StoreError> {
    let sp = tx.savepoint().map_err(backend)?;
    let thread_id = waypoint.thread_id.to_string();
    let seq = waypoint.seq;
    let (next, snapshot_seq) = sp
        .query_row(
            "SELECT next_seq, snapshot_seq FROM aegis_threads WHERE thread_id = ?1",
            [&thread_id],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()
        .map_err(backend)?
        .unwrap_or((0, 0));
    let next = seq_from_sql(&thread_id, next)?;
    if seq != next {
        return Err(StoreError::Conflict {
            thread_id,
            expected_seq: seq,
            actual_next: next,
        });
    }
    let base = staged
        .get(&thread_id)
        .filter(|t| t.seq.checked_add(1) == Some(seq))
        .cloned()
        .or_else(|| tips.base_for(&thread_id, seq));
    let superstep = waypoint.superstep;
    let status = waypoint.status.name();
    let created_at_ms = codec::unix_millis(waypoint.created_at);
    let row = codec::encode(waypoint, base.as_ref(), rule)?;
    let seq_sql = to_sql(seq)?;
    sp.prepare_cached(
        "INSERT INTO aegis_waypoints \
         (thread_id, seq, superstep, status, is_snapshot, created_at_ms, payload) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            thread_id,
            seq_sql,
            superstep,
            status,
            row.snapshot,
            created_at_ms,
            row.payload,
        ])
    })
    .map_err(|e| match e.sqlite_error_code() {
        // The seq check above makes this unreachable for this writer; the
        // unique key still guards the table against any other.
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict {
            thread_id: thread_id.clone(),
            expected_seq: seq,
            actual_next: next + 1,
        },
        _ => backend(e),
    })?;
    let snapshot_seq = if row.snapshot { seq_sql } else { snapshot_seq };
    sp.prepare_cached(
        "INSERT INTO aegis_threads (thread_id, next_seq, snapshot_seq) VALUES (?1, ?2, ?3) \
         ON CONFLICT (thread_id) DO UPDATE \
         SET next_seq = excluded.next_seq, snapshot_seq = excluded.snapshot_seq",
    )
    .and_then(|mut stmt| stmt.execute(rusqlite::params![thread_id, seq_sql + 1, snapshot_seq]))
    .map_err(backend)?;
    sp.commit().map_err(backend)?;
    staged.insert(thread_id, row.tip);
    Ok(())
}
