//! The SQLite schema, its version table and its migrations.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::backend;
use crate::error::StoreError;

/// The schema version this build creates, and the newest it opens.
pub const SQLITE_SCHEMA_VERSION: u32 = 2;

/// `MIGRATIONS[v]` takes a store from schema version `v` to `v + 1`
/// (version 0: no aegis tables yet).
const MIGRATIONS: [&str; SQLITE_SCHEMA_VERSION as usize] = [
    // v1: one row per thread (its next seq and its latest snapshot row), one
    // row per waypoint; `(thread_id, seq)` is unique, so even a writer that
    // skipped the seq check could not store two waypoints in one place.
    "CREATE TABLE aegis_threads (
        thread_id TEXT PRIMARY KEY NOT NULL,
        next_seq INTEGER NOT NULL,
        snapshot_seq INTEGER NOT NULL
    );
    CREATE TABLE aegis_waypoints (
        thread_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        superstep INTEGER NOT NULL,
        status TEXT NOT NULL,
        is_snapshot INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (thread_id, seq)
    );",
    // v2: the effect ledger, one row per effect key (`NodeContext::effect`);
    // the result is the JSON text of what the call returned.
    "CREATE TABLE aegis_effects (
        effect_key TEXT PRIMARY KEY NOT NULL,
        thread_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        starts INTEGER NOT NULL,
        result TEXT
    );
    CREATE INDEX aegis_effects_by_thread ON aegis_effects (thread_id);",
];

fn stored_version(conn: &Connection) -> Result<Option<u32>, StoreError> {
    let has_table = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'aegis_schema_version'",
            [],
            |_| Ok(()),
        )
        .optional()
        .map_err(backend)?
        .is_some();
    if !has_table {
        return Ok(None);
    }
    let version: Option<i64> = conn
        .query_row("SELECT max(version) FROM aegis_schema_version", [], |r| {
            r.get(0)
        })
        .map_err(backend)?;
    version
        .map(|v| {
            u32::try_from(v).map_err(|_| {
                StoreError::Backend(format!("sqlite: invalid schema version {v} in the store"))
            })
        })
        .transpose()
}

fn refuse_newer(version: Option<u32>) -> Result<(), StoreError> {
    match version {
        Some(found) if found > SQLITE_SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
            found,
            supported: SQLITE_SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// Checks the version, switches to WAL, and creates or migrates the schema.
///
/// A newer store is refused before anything is written to it: not even the
/// journal mode changes.
pub(super) fn prepare(conn: &mut Connection) -> Result<(), StoreError> {
    refuse_newer(stored_version(conn)?)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(backend)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend(format!(
            "sqlite: cannot switch the store to WAL mode (it stays in `{mode}` mode)"
        )));
    }
    // Under the write lock: another process may be migrating the same file.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let found = stored_version(&tx)?;
    refuse_newer(found)?;
    let from = found.unwrap_or(0);
    if from == SQLITE_SCHEMA_VERSION {
        return Ok(());
    }
    if found.is_none() {
        tx.execute_batch("CREATE TABLE aegis_schema_version (version INTEGER NOT NULL)")
            .map_err(backend)?;
    }
    for step in &MIGRATIONS[from as usize..] {
        tx.execute_batch(step).map_err(backend)?;
    }
    tx.execute("DELETE FROM aegis_schema_version", [])
        .map_err(backend)?;
    tx.execute(
        "INSERT INTO aegis_schema_version (version) VALUES (?1)",
        [SQLITE_SCHEMA_VERSION],
    )
    .map_err(backend)?;
    tx.commit().map_err(backend)
}
