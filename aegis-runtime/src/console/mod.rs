//! The operator's console: a small web server over a worker fleet's queue
//! (feature `console`).
//!
//! Server-rendered pages, no script: the runs with filters (state, graph,
//! age) and why each waits or was quarantined; the runs pinned to a graph
//! fingerprint no live worker runs, with the live graphs' verdicts; one run
//! with its timeline, its claims, its node attempts (errors redacted) and
//! its waypoints; and what the attempt records say of each LLM provider.
//! Actions (POST forms): answer a parley, cancel, release a quarantined run
//! ([`Client::requeue`](crate::worker::Client::requeue)), retry a run held
//! back by a backoff now ([`Client::retry_now`](crate::worker::Client::retry_now)).
//!
//! Security: without a bearer token the console binds only a loopback
//! address and answers only to its loopback `Host` names (DNS rebinding);
//! with one ([`Console::with_token`]) every request must carry it
//! (`Authorization: Bearer`, or the cookie `/login` sets). Every form
//! carries a per-process random token and a POST whose `Origin` is another
//! site is refused; request bodies are bounded; every value is
//! HTML-escaped.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use aegis_runtime::console::Console;
//! use aegis_runtime::worker::InMemoryRunQueue;
//! use std::sync::Arc;
//!
//! let queue = Arc::new(InMemoryRunQueue::new());
//! let server = Console::new(queue).bind("127.0.0.1:8089".parse()?).await?;
//! println!("console: {}", server.url());
//! server.stopped().await?;
//! # Ok(()) }
//! ```

mod age;
mod app;
mod escape;
mod guard;
mod pages;
mod redacted;
mod server;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::share::IntoShared;
use crate::worker::{Client, RunQueue};

/// The largest request body the console reads (a parley answer included).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Why the console could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// A non-loopback address without a bearer token: anyone who can reach
    /// the port could answer, cancel and release runs.
    #[error(
        "refusing to serve {addr} without a bearer token: bind a loopback address, or set a token with `Console::with_token`"
    )]
    NonLoopbackWithoutToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The configured token is empty.
    #[error("the console's bearer token is empty")]
    EmptyToken,
    /// The socket could not be bound or served.
    #[error("console socket: {0}")]
    Io(#[from] std::io::Error),
    /// The serving task panicked or was aborted.
    #[error("the console's server task failed: {0}")]
    Task(String),
}

/// A console over one run queue, ready to [`bind`](Console::bind).
#[derive(Clone)]
pub struct Console {
    client: Client,
    token: Option<String>,
    max_runs: usize,
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: only whether there is one.
        f.debug_struct("Console")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("max_runs", &self.max_runs)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `queue` (the queue itself, or an `Arc` of it).
    pub fn new(queue: impl IntoShared<dyn RunQueue>) -> Self {
        Console {
            client: Client::new(queue),
            token: None,
            max_runs: 200,
        }
    }

    /// Requires `token` on every request (`Authorization: Bearer <token>`,
    /// or the cookie the `/login` page sets), and allows binding an address
    /// other than loopback.
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How many runs a list shows at most (the latest submitted; default
    /// 200). The provider page reads the histories of at most half as many.
    #[must_use]
    pub fn with_max_runs(mut self, max_runs: usize) -> Self {
        self.max_runs = max_runs.max(1);
        self
    }

    /// Binds `addr` (port 0: any free port) and serves in a background
    /// task until [`ConsoleServer::shutdown`]. Refuses an address that is
    /// not loopback unless a token is set.
    pub async fn bind(self, addr: SocketAddr) -> Result<ConsoleServer, ConsoleError> {
        if self.token.as_deref() == Some("") {
            return Err(ConsoleError::EmptyToken);
        }
        if !addr.ip().is_loopback() && self.token.is_none() {
            return Err(ConsoleError::NonLoopbackWithoutToken { addr });
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let app = Arc::new(app::App {
            client: self.client,
            token: self.token,
            csrf: guard::random_token(),
            local,
            max_runs: self.max_runs,
        });
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, server::router(app))
                .with_graceful_shutdown(async move { stopping.cancelled().await })
                .await
        });
        Ok(ConsoleServer { local, stop, task })
    }
}

/// A console serving in the background.
#[derive(Debug)]
pub struct ConsoleServer {
    local: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl ConsoleServer {
    /// The address it serves (the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Its base URL: `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.local)
    }

    /// Stops accepting, lets requests in flight finish, and waits.
    pub async fn shutdown(self) -> Result<(), ConsoleError> {
        self.stop.cancel();
        self.stopped().await
    }

    /// Waits until the server stops (a shutdown, or a socket error).
    pub async fn stopped(self) -> Result<(), ConsoleError> {
        match self.task.await {
            Ok(result) => Ok(result?),
            Err(e) => Err(ConsoleError::Task(e.to_string())),
        }
    }
}
