//! The runtime behind the `aegis` facade: state, graphs, the superstep
//! engine and the Aegis fault-tolerance layer. Use it through `aegis`, which
//! re-exports this crate's modules and flat API; its crate docs (the README)
//! open with a glossary of the themed names — `Battlefield` is the graph
//! state, a `Waypoint` a checkpoint, a `Battalion` a subgraph, a `Paladin`
//! an LLM agent, an `Aegis` one node's retry/timeout/fallback/cache policy.

#![forbid(unsafe_code)]

mod aegis;
pub mod cache;
mod canon;
mod config;
mod deadline;
pub mod engine;
pub mod error;
mod few;
pub mod graph;
pub mod id;
pub mod llm;
mod paladin;
pub mod render;
mod share;
pub mod state;
pub mod trace;
pub mod waypoint;
pub mod worker;

pub use crate::aegis::*;
pub use cache::*;
pub use config::{ConfigError, EnvValue, MAX_CONFIG_DURATION_SECS};
pub use engine::*;
pub use error::*;
pub use graph::*;
pub use id::*;
pub use llm::*;
pub use paladin::*;
pub use share::IntoShared;
pub use state::*;
pub use trace::*;
pub use waypoint::*;

// The SSE parsers are public for the fuzz targets, the property tests and
// the benches, not for programs: their definitions in `llm/` are
// `#[doc(hidden)]`, so no rendered page lists them.

/// Re-exported so users and generated code name one version.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
