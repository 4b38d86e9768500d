//! Graceful shutdown on SIGTERM / SIGINT, the signals a process supervisor
//! (systemd, Kubernetes, a terminal's Ctrl-C) sends before it kills.

use tokio_util::sync::CancellationToken;

use super::{WorkerError, WorkerPool};

/// A token cancelled when the process receives SIGTERM or SIGINT (Ctrl-C;
/// on non-Unix platforms only Ctrl-C), for [`WorkerPool::run`]: the pool
/// then halts its runs durably within
/// [`WorkerConfig::shutdown_grace`](super::WorkerConfig::shutdown_grace),
/// releases their leases (the threads are claimable at once by another
/// worker, not after `lease_ttl`) and returns, so the process can exit 0.
///
/// From the first call on, these signals no longer end the process by
/// themselves: the caller must return once the token is cancelled. Call it
/// within a tokio runtime with its I/O driver enabled
/// (`#[tokio::main]`, or `enable_all`). Fails, as [`WorkerError::Signal`],
/// if the handlers cannot be installed.
///
/// ```no_run
/// # async fn demo(pool: aegis_runtime::worker::WorkerPool) -> Result<(), aegis_runtime::worker::WorkerError> {
/// let stop = aegis_runtime::worker::shutdown_signal()?;
/// pool.run(stop).await?; // returns after SIGTERM, its leases released
/// # Ok(()) }
/// ```
pub fn shutdown_signal() -> Result<CancellationToken, WorkerError> {
    let token = CancellationToken::new();
    let received = signals()?;
    let cancel = token.clone();
    tokio::spawn(async move {
        let name = received.await;
        tracing::info!(signal = name, "aegis worker: shutting down");
        cancel.cancel();
    });
    Ok(token)
}

fn install_error(e: std::io::Error) -> WorkerError {
    WorkerError::Signal(e.to_string())
}

/// Installs the handlers now (so a signal that arrives before the first
/// poll is not lost) and returns a future naming the first one received.
#[cfg(unix)]
fn signals() -> Result<impl std::future::Future<Output = &'static str> + Send, WorkerError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(install_error)?;
    let mut int = signal(SignalKind::interrupt()).map_err(install_error)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Ctrl-C only; its handler is installed when the returned future is
/// first polled.
#[cfg(not(unix))]
fn signals() -> Result<impl std::future::Future<Output = &'static str> + Send, WorkerError> {
    Ok(async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(e) => {
                tracing::warn!(error = %install_error(e), "aegis worker: no Ctrl-C handler");
                std::future::pending().await
            }
        }
    })
}

impl WorkerPool {
    /// [`WorkerPool::run`] until the process receives SIGTERM or SIGINT
    /// (see [`shutdown_signal`]): the runs in flight halt durably within
    /// `shutdown_grace`, their leases are released, and this returns
    /// `Ok(())`.
    pub async fn run_until_signal(self) -> Result<(), WorkerError> {
        let stop = shutdown_signal()?;
        self.run(stop).await
    }
}
