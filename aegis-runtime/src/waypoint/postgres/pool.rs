//! A small connection pool: at most `size` connections, each with the
//! store's statements prepared once. A broken connection is dropped and
//! replaced on demand.

use std::ops::Deref;
use std::sync::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::backend;
use crate::waypoint::StoreError;

/// The store's statements, prepared on one connection.
pub(super) struct Statements {
    pub(super) put_first: Statement,
    pub(super) put_next: Statement,
    pub(super) next_seq: Statement,
    pub(super) latest: Statement,
    pub(super) history: Statement,
    pub(super) row_stats: Statement,
}

/// A connection and its statements.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) statements: Statements,
}

pub(super) struct Pool {
    config: Config,
    quoted_schema: String,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

/// Where a connection attempt went, without credentials.
pub(super) fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "host={} port={} dbname={} user={}",
        if hosts.is_empty() {
            "localhost".to_string()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_string()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(default)"),
        config.get_user().unwrap_or("(default)"),
    )
}

/// Opens one connection, driving it on a spawned task.
pub(super) async fn connect(config: &Config) -> Result<Client, StoreError> {
    let (client, connection) = config.connect(NoTls).await.map_err(|e| {
        StoreError::Backend(format!(
            "postgres: cannot connect ({}): {e}",
            describe(config)
        ))
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "aegis: a PostgreSQL waypoint connection failed");
        }
    });
    Ok(client)
}

impl Pool {
    pub(super) fn new(config: Config, quoted_schema: String, size: usize) -> Self {
        Pool {
            config,
            quoted_schema,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// Adds a connection that is already open (the one that migrated).
    pub(super) async fn adopt(&self, client: Client) -> Result<(), StoreError> {
        let conn = self.prepare(client).await?;
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        Ok(())
    }

    /// A connection, waiting while all `size` are in use.
    pub(super) async fn get(&self) -> Result<Lease<'_>, StoreError> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Backend("postgres: the pool is closed".to_string()))?;
        let reusable = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain(|c| !c.client.is_closed());
            idle.pop()
        };
        let conn = match reusable {
            Some(c) => c,
            None => self.prepare(connect(&self.config).await?).await?,
        };
        Ok(Lease {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }

    async fn prepare(&self, client: Client) -> Result<Conn, StoreError> {
        let s = &self.quoted_schema;
        let columns = "(thread_id, seq, superstep, status, is_snapshot, created_at_ms, payload)";
        let put_first = client
            .prepare_typed(
                &format!(
                    "WITH t AS (INSERT INTO {s}.aegis_threads (thread_id, next_seq, snapshot_seq) \
                     VALUES ($1, 1, 0) ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id) \
                     INSERT INTO {s}.aegis_waypoints {columns} \
                     SELECT thread_id, 0, $2, $3, TRUE, $4, $5 FROM t"
                ),
                &[Type::TEXT, Type::INT8, Type::TEXT, Type::INT8, Type::BYTEA],
            )
            .await
            .map_err(backend)?;
        let put_next = client
            .prepare_typed(
                &format!(
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
            )
            .await
            .map_err(backend)?;
        let next_seq = client
            .prepare_typed(
                &format!("SELECT next_seq FROM {s}.aegis_threads WHERE thread_id = $1"),
                &[Type::TEXT],
            )
            .await
            .map_err(backend)?;
        let latest = client
            .prepare_typed(
                &format!(
                    "SELECT w.seq, w.payload FROM {s}.aegis_waypoints w \
                     JOIN {s}.aegis_threads t ON t.thread_id = w.thread_id \
                     WHERE t.thread_id = $1 AND w.seq >= t.snapshot_seq ORDER BY w.seq"
                ),
                &[Type::TEXT],
            )
            .await
            .map_err(backend)?;
        let history = client
            .prepare_typed(
                &format!(
                    "SELECT seq, payload FROM {s}.aegis_waypoints \
                     WHERE thread_id = $1 ORDER BY seq"
                ),
                &[Type::TEXT],
            )
            .await
            .map_err(backend)?;
        let row_stats = client
            .prepare_typed(
                &format!(
                    "SELECT seq, is_snapshot, octet_length(payload)::BIGINT \
                     FROM {s}.aegis_waypoints WHERE thread_id = $1 ORDER BY seq"
                ),
                &[Type::TEXT],
            )
            .await
            .map_err(backend)?;
        Ok(Conn {
            client,
            statements: Statements {
                put_first,
                put_next,
                next_seq,
                latest,
                history,
                row_stats,
            },
        })
    }
}

/// A connection on loan; it goes back to the pool when dropped, unless it
/// broke.
pub(super) struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
    _permit: SemaphorePermit<'a>,
}

impl Deref for Lease<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        // `conn` is only taken in `drop`.
        match &self.conn {
            Some(c) => c,
            None => unreachable!("a lease's connection is taken only when it is dropped"),
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !conn.client.is_closed()
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
    }
}
