//! Helpers shared by the integration tests; each test crate declares
//! `mod support;` and uses the subset it needs.
//!
//! - [`fixtures`]: schemas, engines, small nodes, and running a graph to
//!   its final state.
//! - [`stores`]: temporary folders and `PostgreSQL` schemas for the durable
//!   stores, and a counting graph.
//! - [`http_server`]: a scripted HTTP server on 127.0.0.1 for the LLM
//!   adapters.
//! - [`logs`]: the test binary's `tracing` output, captured.
//! - `otlp` (feature `otel`): an OTLP/HTTP collector decoding the real
//!   protobuf.
//! - [`secrets`]: an API key and the checks that it leaked nowhere.
//! - [`third_party`]: a waypoint store and a node cache written from the
//!   public traits alone.
#![allow(unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

// Each test crate uses a subset: the rest is dead code there.
#[allow(dead_code)]
pub(crate) mod fixtures;
#[allow(dead_code)]
pub(crate) mod http_server;
#[allow(dead_code)]
pub(crate) mod logs;
#[cfg(feature = "otel")]
#[allow(dead_code)]
pub(crate) mod otlp;
#[allow(dead_code)]
pub(crate) mod secrets;
#[allow(dead_code)]
pub(crate) mod stores;
#[allow(dead_code)]
pub(crate) mod third_party;
