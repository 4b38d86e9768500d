//! The runtime behind the `aegis` facade: state, graphs, the superstep
//! engine and the Aegis fault-tolerance layer. Use it through `aegis`, which
//! re-exports this crate's flat API.

#![forbid(unsafe_code)]

mod aegis;
mod cache;
mod engine;
mod error;
mod graph;
mod llm;
mod paladin;
mod state;
mod trace;
mod waypoint;

pub use crate::aegis::*;
pub use cache::*;
pub use engine::*;
pub use error::*;
pub use graph::*;
pub use llm::*;
pub use paladin::*;
pub use state::*;
pub use trace::*;
pub use waypoint::*;

/// Re-exported so users and generated code name one version.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
