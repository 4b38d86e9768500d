//! Paladins: LLM agents as nodes, and the port the engine runs them through.

mod charge;
mod output_schema;
mod port;
mod service;

pub use crate::graph::paladin::{Armament, Paladin};
pub(crate) use output_schema::parse_and_check;
pub(crate) use port::UnconfiguredPaladinPort;
pub use port::{PaladinPort, PaladinResult};
pub use service::PaladinExecutionService;
