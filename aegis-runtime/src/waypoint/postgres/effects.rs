//! The effect ledger on PostgreSQL (`aegis_effects`): each transition of
//! the ledger's state machine is one statement, fenced on a worker by the
//! lease row's epoch in the same statement (read `FOR SHARE`, as a fenced
//! waypoint write reads it).

use async_trait::async_trait;
use serde_json::Value;

use super::error::backend;
use super::pool::PgPool;
use crate::error::StoreError;
use crate::graph::{EffectEntry, EffectLedger, EffectStart, EffectState};
use crate::id::validate_thread_id;

/// The lease an effect write is fenced by: the row `key` of `table` must
/// still hold `epoch`.
#[derive(Debug, Clone)]
pub(crate) struct PgEffectFence {
    pub(crate) table: &'static str,
    pub(crate) key: String,
    pub(crate) epoch: i64,
}

/// The ledger of a [`PostgresWaypointStore`](super::PostgresWaypointStore),
/// fenced or not.
pub(crate) struct PgEffectLedger {
    pub(super) pool: PgPool,
    pub(super) quoted: String,
    pub(super) fence: Option<PgEffectFence>,
}

const COLUMNS: &str = "effect_key, thread_id, node_id, name, state, starts, result";

fn entry(row: &tokio_postgres::Row) -> Result<EffectEntry, StoreError> {
    let state: String = row.try_get(4).map_err(backend)?;
    let starts: i32 = row.try_get(5).map_err(backend)?;
    let result: Option<String> = row.try_get(6).map_err(backend)?;
    let key: String = row.try_get(0).map_err(backend)?;
    let corrupt = |what: String| StoreError::Backend(format!("postgres: effect {key}: {what}"));
    Ok(EffectEntry {
        state: EffectState::from_name(&state)
            .ok_or_else(|| corrupt(format!("unknown state `{state}`")))?,
        starts: u32::try_from(starts).map_err(|_| corrupt(format!("{starts} starts")))?,
        result: result
            .map(|r| serde_json::from_str::<Value>(&r))
            .transpose()
            .map_err(|e| corrupt(format!("unreadable result: {e}")))?,
        thread_id: row.try_get(1).map_err(backend)?,
        node_id: row.try_get(2).map_err(backend)?,
        name: row.try_get(3).map_err(backend)?,
        key,
    })
}

impl PgEffectLedger {
    /// The fence's CTE, its condition, and the parameters they take
    /// (numbered from `first`).
    fn fence_sql(&self, first: usize) -> (String, String) {
        match &self.fence {
            None => (String::new(), "TRUE".to_string()),
            Some(f) => (
                format!(
                    "WITH f AS (SELECT 1 FROM {}.{} WHERE thread_id = ${first}::TEXT AND epoch = ${}::BIGINT FOR SHARE) ",
                    self.quoted,
                    f.table,
                    first + 1
                ),
                "EXISTS (SELECT 1 FROM f)".to_string(),
            ),
        }
    }

    /// `LeaseLost` if the fence no longer holds; `Ok` otherwise.
    async fn check_fence(&self) -> Result<(), StoreError> {
        let Some(f) = &self.fence else { return Ok(()) };
        let conn = self.pool.get().await?;
        let row = conn
            .query_opt(
                &format!(
                    "SELECT epoch FROM {}.{} WHERE thread_id = $1",
                    self.quoted, f.table
                ),
                &[&f.key],
            )
            .await
            .map_err(backend)?;
        let current = row
            .map(|r| r.try_get::<_, i64>(0))
            .transpose()
            .map_err(backend)?;
        if current == Some(f.epoch) {
            return Ok(());
        }
        Err(StoreError::LeaseLost {
            thread_id: f.key.clone(),
            epoch: u64::try_from(f.epoch).unwrap_or(0),
            current: current.and_then(|c| u64::try_from(c).ok()).unwrap_or(0),
        })
    }

    /// Runs `sql` (one statement) with `params` and the fence's two.
    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let conn = self.pool.get().await?;
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.to_vec();
        if let Some(f) = &self.fence {
            all.push(&f.key);
            all.push(&f.epoch);
        }
        // Prepared once per connection: each transition is then one round
        // trip.
        let statement = conn.prepare_cached(sql).await.map_err(backend)?;
        conn.execute(&statement, &all).await.map_err(backend)
    }

    async fn get(&self, key: &str) -> Result<Option<EffectEntry>, StoreError> {
        let conn = self.pool.get().await?;
        let row = conn
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM {}.aegis_effects WHERE effect_key = $1",
                    self.quoted
                ),
                &[&key],
            )
            .await
            .map_err(backend)?;
        row.as_ref().map(entry).transpose()
    }

    async fn update(
        &self,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let (with, cond) = self.fence_sql(params.len() + 1);
        let sql = format!(
            "{with}UPDATE {}.aegis_effects SET {set} \
             WHERE effect_key = $1::TEXT AND state = 'started' AND {cond}",
            self.quoted
        );
        if self.execute(&sql, params).await? == 0 {
            // Done already (nothing to do), or fenced off.
            self.check_fence().await?;
        }
        Ok(())
    }
}

#[async_trait]
impl EffectLedger for PgEffectLedger {
    async fn begin(&self, start: &EffectStart) -> Result<Option<EffectEntry>, StoreError> {
        validate_thread_id(&start.thread_id).map_err(StoreError::InvalidThreadId)?;
        self.pool
            .within(async {
                let (with, cond) = self.fence_sql(5);
                let sql = format!(
                    "{with}INSERT INTO {}.aegis_effects ({COLUMNS}) \
                     SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, 'started', 1, NULL WHERE {cond} \
                     ON CONFLICT (effect_key) DO NOTHING",
                    self.quoted
                );
                let n = self
                    .execute(
                        &sql,
                        &[&start.key, &start.thread_id, &start.node_id, &start.name],
                    )
                    .await?;
                if n == 1 {
                    return Ok(None);
                }
                match self.get(&start.key).await? {
                    Some(e) => Ok(Some(e)),
                    None => {
                        self.check_fence().await?;
                        Err(StoreError::Backend(format!(
                            "postgres: effect {} was neither started nor found",
                            start.key
                        )))
                    }
                }
            })
            .await
    }

    async fn restart(&self, key: &str) -> Result<(), StoreError> {
        self.pool
            .within(self.update("starts = starts + 1", &[&key]))
            .await
    }

    async fn finish(&self, key: &str, result: &Value) -> Result<(), StoreError> {
        let result = result.to_string();
        self.pool
            .within(self.update("state = 'done', result = $2::TEXT", &[&key, &result]))
            .await
    }

    async fn entries(&self, thread_id: &str) -> Result<Vec<EffectEntry>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        self.pool
            .within(async {
                let conn = self.pool.get().await?;
                let rows = conn
                    .query(
                        &format!(
                            "SELECT {COLUMNS} FROM {}.aegis_effects WHERE thread_id = $1 ORDER BY effect_key",
                            self.quoted
                        ),
                        &[&thread_id],
                    )
                    .await
                    .map_err(backend)?;
                rows.iter().map(entry).collect()
            })
            .await
    }
}
