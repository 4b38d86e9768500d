//! The store's statements: their text, built once for the store's schema,
//! and prepared once per pooled connection (deadpool's statement cache).

use deadpool_postgres::Object;
use tokio_postgres::Statement;
use tokio_postgres::types::Type;

use super::pool::WAYPOINT_COLUMNS;

/// One statement's text and parameter types.
pub(super) struct Sql {
    text: String,
    types: &'static [Type],
}

impl Sql {
    /// The statement prepared on `client`, from its cache after the first
    /// time.
    pub(super) async fn on(&self, client: &Object) -> Result<Statement, tokio_postgres::Error> {
        client.prepare_typed_cached(&self.text, self.types).await
    }
}

/// Every statement the store runs, for one schema.
pub(super) struct Statements {
    /// The store's schema, quoted for SQL.
    pub(super) quoted_schema: String,
    pub(super) put_first: Sql,
    pub(super) put_next: Sql,
    pub(super) next_seq: Sql,
    pub(super) latest: Sql,
    pub(super) history: Sql,
    pub(super) row_stats: Sql,
}

impl Statements {
    /// The statements on `quoted_schema` (already quoted).
    pub(super) fn new(quoted_schema: String) -> Self {
        let s = &quoted_schema;
        let columns = WAYPOINT_COLUMNS;
        let sql = |text: String, types: &'static [Type]| Sql { text, types };
        Statements {
            put_first: sql(
                format!(
                    "WITH t AS (INSERT INTO {s}.aegis_threads (thread_id, next_seq, snapshot_seq) \
                     VALUES ($1, 1, 0) ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id) \
                     INSERT INTO {s}.aegis_waypoints {columns} \
                     SELECT thread_id, 0, $2, $3, TRUE, $4, $5 FROM t"
                ),
                &[Type::TEXT, Type::INT8, Type::TEXT, Type::INT8, Type::BYTEA],
            ),
            put_next: sql(
                format!(
                    "WITH t AS (UPDATE {s}.aegis_threads SET next_seq = $2 + 1, \
                     snapshot_seq = CASE WHEN $5 THEN $2 ELSE snapshot_seq END \
                     WHERE thread_id = $1 AND next_seq = $2 RETURNING thread_id) \
                     INSERT INTO {s}.aegis_waypoints {columns} \
                     SELECT thread_id, $2, $3, $4, $5, $6, $7 FROM t"
                ),
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT8,
                    Type::TEXT,
                    Type::BOOL,
                    Type::INT8,
                    Type::BYTEA,
                ],
            ),
            next_seq: sql(
                format!("SELECT next_seq FROM {s}.aegis_threads WHERE thread_id = $1"),
                &[Type::TEXT],
            ),
            latest: sql(
                format!(
                    "SELECT w.seq, w.payload FROM {s}.aegis_waypoints w \
                     JOIN {s}.aegis_threads t ON t.thread_id = w.thread_id \
                     WHERE t.thread_id = $1 AND w.seq >= t.snapshot_seq ORDER BY w.seq"
                ),
                &[Type::TEXT],
            ),
            history: sql(
                format!(
                    "SELECT seq, payload FROM {s}.aegis_waypoints \
                     WHERE thread_id = $1 ORDER BY seq"
                ),
                &[Type::TEXT],
            ),
            row_stats: sql(
                format!(
                    "SELECT seq, is_snapshot, octet_length(payload)::BIGINT \
                     FROM {s}.aegis_waypoints WHERE thread_id = $1 ORDER BY seq"
                ),
                &[Type::TEXT],
            ),
            quoted_schema,
        }
    }
}
