//! The connection pool every PostgreSQL part of aegis uses (the waypoint
//! store and the run queue): `deadpool-postgres`, over the rustls connector
//! the connection string's `sslmode` asks for.
//!
//! `pool_size` is deadpool's `max_size`. Connections open lazily, a caller
//! waits while all are lent out, and a connection found closed on return
//! is dropped and replaced on demand ([`RecyclingMethod::Fast`]).
//! Statements are prepared once per connection through deadpool's
//! statement cache.
//!
//! Every wait has a deadline, the options' `call_timeout`: getting a
//! connection (waiting for one, opening one, recycling one), each call made
//! on it ([`PgPool::within`]), and the socket itself (`connect_timeout`,
//! and `tcp_user_timeout`: data the server has not acknowledged for that
//! long closes the connection), unless the connection string sets them. A
//! connection that went dark without a reset or a close (a switch failure,
//! a firewall change) fails the call after `call_timeout`, not after the
//! kernel's minutes of retransmissions.

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use std::future::Future;
use std::time::Duration;
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
    call_timeout: Duration,
}

/// The longest socket timeout set: a kernel option in milliseconds, and
/// past an hour a deadline no longer protects anything.
const MAX_SOCKET_TIMEOUT: Duration = Duration::from_secs(3600);

impl PgPool {
    /// A pool of at most `size` (at least 1) connections to `config`,
    /// through `tls` when `sslmode` asks for it. No connection opens yet.
    pub(crate) fn new(
        mut config: Config,
        tls: Option<MakeRustlsConnect>,
        size: usize,
        call_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let call_timeout = call_timeout.max(Duration::from_millis(1));
        let socket_timeout = call_timeout.min(MAX_SOCKET_TIMEOUT);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(socket_timeout);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(socket_timeout);
        }
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
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(call_timeout))
            .create_timeout(Some(call_timeout))
            .recycle_timeout(Some(call_timeout))
            .build()
            .map_err(|e| StoreError::Backend(format!("postgres: cannot build the pool: {e}")))?;
        Ok(PgPool {
            pool,
            config,
            call_timeout,
        })
    }

    /// `call`, failed after the pool's call timeout.
    pub(crate) async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.call_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Backend(format!(
                    "postgres: {}: no answer within {:?} (call_timeout); the connection may be down",
                    super::error::describe(&self.config),
                    self.call_timeout
                )))
            })
    }

    /// A connection, waiting while all are lent out; it goes back to the
    /// pool when dropped.
    pub(crate) async fn get(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            // deadpool retries a connection that fails its recycle check by
            // opening another, so a backend error is a failed connect.
            PoolError::Backend(e) => connect_error(&self.config, &e),
            PoolError::Timeout(_) => StoreError::Backend(format!(
                "postgres: {}: no connection within {:?} (call_timeout)",
                super::error::describe(&self.config),
                self.call_timeout
            )),
            other => StoreError::Backend(format!("postgres: no connection: {other}")),
        })
    }
}
