//! The error taxonomy: transience, provider and agent errors, node errors and
//! engine errors.

mod engine;
mod llm;
mod node;
mod paladin;
mod transience;

pub use engine::{EdgeRef, EngineError, PolicyOffender};
pub use llm::{LlmError, ProviderAttempt, status_transience};
pub use node::{NodeError, NodeErrorSource, StateNodeError, TimeoutKind};
pub use paladin::PaladinError;
pub use transience::Transience;
