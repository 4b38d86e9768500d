//! The error taxonomy: transience, provider and agent errors, node errors and
//! engine errors.

pub(crate) mod connection;
mod engine;
mod evolution;
pub(crate) mod llm;
mod node;
mod paladin;
pub(crate) mod redact;
mod secrets;
mod store;
mod transience;

pub(crate) use connection::redact_connection_string;
#[cfg(any(feature = "redis-cache", feature = "postgres"))]
pub(crate) use connection::scrub_values;
pub use engine::{EdgeRef, EngineError, PolicyOffender};
pub use evolution::{GraphChange, Incompatibility, MigrationError};
pub use llm::{LlmError, ProviderAttempt};
pub use node::{NodeError, NodeErrorSource, StateNodeError, TimeoutKind};
pub use paladin::PaladinError;
pub(crate) use redact::{REDACTED, bound_excerpt, redact_json, redact_secrets};
pub use secrets::KnownSecrets;
pub use store::StoreError;
pub use transience::Transience;
