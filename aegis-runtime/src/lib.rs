//! The runtime behind the `aegis` facade: state, graphs, the superstep
//! engine and the Aegis fault-tolerance layer. Use it through `aegis`.

pub mod aegis;
pub mod cache;
pub mod engine;
pub mod error;
pub mod graph;
pub mod paladin;
pub mod state;
pub mod trace;
pub mod waypoint;

pub use crate::aegis::*;
pub use cache::*;
pub use engine::*;
pub use error::*;
pub use graph::*;
pub use paladin::*;
pub use state::*;
pub use trace::*;
pub use waypoint::*;

/// Re-exported so users and generated code name one version.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
