//! The connection pool every PostgreSQL part of aegis uses (the waypoint
//! store and the run queue): `deadpool-postgres`, over the rustls connector
//! the connection string's `sslmode` asks for.
//!
//! `pool_size` is deadpool's `max_size`. Connections open lazily, a caller
//! waits while all are lent out (deadpool's default: no wait timeout, as
//! the store's own pool did), and a connection found closed on return is
//! dropped and replaced on demand ([`RecyclingMethod::Fast`]). Statements
//! are prepared once per connection through deadpool's statement cache.

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::Config;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::connect_error;
use crate::error::StoreError;

/// The waypoint table's columns, in the order every insert lists them.
pub(super) const WAYPOINT_COLUMNS: &str =
    "(thread_id, seq, superstep, status, is_snapshot, created_at_ms, payload)";

/// The connector a configuration needs: none for `sslmode=disable`, rustls
/// otherwise (see [`super::tls`]).
pub(crate) fn tls_for(
    config: &Config,
    verify: super::tls::Verify,
) -> Result<Option<MakeRustlsConnect>, StoreError> {
    match config.get_ssl_mode() {
        SslMode::Disable => Ok(None),
        _ => super::tls::connector(verify).map(Some),
    }
}

/// A pool of at most `size` (at least 1) connections to one server, and
/// that server's configuration (to describe a failed connection without its
/// password). Cloning shares the pool.
#[derive(Clone)]
pub(crate) struct PgPool {
    pool: Pool,
    config: Config,
}

impl PgPool {
    /// A pool of at most `size` (at least 1) connections to `config`,
    /// through `tls` when `sslmode` asks for it. No connection opens yet.
    pub(crate) fn new(
        config: Config,
        tls: Option<MakeRustlsConnect>,
        size: usize,
    ) -> Result<Self, StoreError> {
        let tls = match tls {
            Some(tls) => tls,
            // `sslmode=disable`: tokio-postgres never invokes the connector,
            // but the manager's type needs one.
            None => super::tls::connector(super::tls::Verify::None)?,
        };
        let manager = Manager::from_config(
            config.clone(),
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .build()
            .map_err(|e| StoreError::Backend(format!("postgres: cannot build the pool: {e}")))?;
        Ok(PgPool { pool, config })
    }

    /// A connection, waiting while all are lent out; it goes back to the
    /// pool when dropped.
    pub(crate) async fn get(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            // deadpool retries a connection that fails its recycle check by
            // opening another, so a backend error is a failed connect.
            PoolError::Backend(e) => connect_error(&self.config, &e),
            other => StoreError::Backend(format!("postgres: no connection: {other}")),
        })
    }
}
