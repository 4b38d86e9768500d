//! Helpers shared by the integration tests (each test crate uses a subset).

pub(crate) mod http_server;
pub(crate) mod secrets;
