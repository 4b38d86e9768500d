//! The PostgreSQL schema, its version table and its migrations.

use tokio_postgres::Client;

use super::backend;
use crate::error::StoreError;

/// The schema version this build creates, and the newest it opens.
pub const POSTGRES_SCHEMA_VERSION: u32 = 2;

/// `MIGRATIONS[v]` takes a schema from version `v` to `v + 1` (version 0:
/// no aegis tables yet). `{s}` stands for the quoted schema name.
const MIGRATIONS: [&str; POSTGRES_SCHEMA_VERSION as usize] = [
    // v1: one row per thread (its next seq and its latest snapshot row), one
    // row per waypoint; `(thread_id, seq)` is unique, so even a writer that
    // skipped the seq check could not store two waypoints in one place.
    "CREATE TABLE {s}.aegis_threads (
        thread_id TEXT PRIMARY KEY,
        next_seq BIGINT NOT NULL,
        snapshot_seq BIGINT NOT NULL
    );
    CREATE TABLE {s}.aegis_waypoints (
        thread_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        superstep BIGINT NOT NULL,
        status TEXT NOT NULL,
        is_snapshot BOOLEAN NOT NULL,
        created_at_ms BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        PRIMARY KEY (thread_id, seq)
    );",
    // v2: the effect ledger, one row per effect key (`NodeContext::effect`);
    // the result is the JSON text of what the call returned.
    "CREATE TABLE {s}.aegis_effects (
        effect_key TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        starts INTEGER NOT NULL,
        result TEXT
    );
    CREATE INDEX aegis_effects_by_thread ON {s}.aegis_effects (thread_id);",
];

/// Serialises migrations of one schema across processes (with the schema
/// name's hash as the second key).
const MIGRATION_LOCK: i32 = 0x4165_6769; // "Aegi"

/// `schema` if it is a plain identifier, quoted for use in SQL.
pub(crate) fn quote_schema(schema: &str) -> Result<String, StoreError> {
    let mut chars = schema.chars();
    let plain = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63;
    if !plain {
        return Err(StoreError::Backend(format!(
            "postgres: schema name {schema:?} must be 1 to 63 ASCII letters, digits or `_`, not starting with a digit"
        )));
    }
    Ok(format!("\"{schema}\""))
}

async fn stored_version(
    tx: &tokio_postgres::Transaction<'_>,
    quoted: &str,
) -> Result<Option<u32>, StoreError> {
    let table = format!("{quoted}.aegis_schema_version");
    let exists: bool = tx
        .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&table])
        .await
        .map_err(backend)?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let version: Option<i32> = tx
        .query_one(&format!("SELECT max(version) FROM {table}"), &[])
        .await
        .map_err(backend)?
        .get(0);
    version
        .map(|v| {
            u32::try_from(v).map_err(|_| {
                StoreError::Backend(format!("postgres: invalid schema version {v} in the store"))
            })
        })
        .transpose()
}

/// Creates or migrates the schema; a newer one is refused untouched.
pub(super) async fn prepare(client: &mut Client, schema: &str) -> Result<(), StoreError> {
    let quoted = quote_schema(schema)?;
    let tx = client.transaction().await.map_err(backend)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2::text))",
        &[&MIGRATION_LOCK, &schema],
    )
    .await
    .map_err(backend)?;
    let found = stored_version(&tx, &quoted).await?;
    let from = match found {
        Some(found) if found > POSTGRES_SCHEMA_VERSION => {
            return Err(StoreError::SchemaTooNew {
                found,
                supported: POSTGRES_SCHEMA_VERSION,
            });
        }
        Some(found) if found == POSTGRES_SCHEMA_VERSION => return Ok(()),
        Some(found) => found,
        None => {
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {quoted};
                 CREATE TABLE {quoted}.aegis_schema_version (version INTEGER NOT NULL);"
            ))
            .await
            .map_err(backend)?;
            0
        }
    };
    for step in &MIGRATIONS[from as usize..] {
        tx.batch_execute(&step.replace("{s}", &quoted))
            .await
            .map_err(backend)?;
    }
    let version = POSTGRES_SCHEMA_VERSION as i32;
    tx.batch_execute(&format!("DELETE FROM {quoted}.aegis_schema_version"))
        .await
        .map_err(backend)?;
    tx.execute(
        &format!("INSERT INTO {quoted}.aegis_schema_version (version) VALUES ($1)"),
        &[&version],
    )
    .await
    .map_err(backend)?;
    tx.commit().await.map_err(backend)
}
