//! What every handler and the guard share, in a file of its own so the
//! guard need not import the routes.

use std::net::SocketAddr;

use crate::worker::Client;

/// What every handler shares.
pub(crate) struct App {
    pub(crate) client: Client,
    pub(crate) token: Option<String>,
    /// The per-process form token.
    pub(crate) csrf: String,
    pub(crate) local: SocketAddr,
    pub(crate) max_runs: usize,
}
