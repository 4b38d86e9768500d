//! The error taxonomy: transience, provider and agent errors, node errors and
//! engine errors.

mod connection;
mod engine;
mod evolution;
mod llm;
mod node;
mod paladin;
mod redact;
mod secrets;
mod store;
mod transience;

pub use connection::redact_connection_string;
#[cfg(any(feature = "redis-cache", feature = "postgres"))]
pub(crate) use connection::scrub_values;
pub use engine::{EdgeRef, EngineError, PolicyOffender};
pub use evolution::{GraphChange, Incompatibility, MigrationError};
pub use llm::{LlmError, ProviderAttempt, status_transience};
pub use node::{NodeError, NodeErrorSource, StateNodeError, TimeoutKind};
pub use paladin::PaladinError;
pub use redact::{
    EXCERPT_LIMIT, REDACTED, bound_excerpt, map_http_status, parse_retry_after, redact_excerpt,
    redact_secrets, retry_after_hint,
};
pub use secrets::KnownSecrets;
pub use store::StoreError;
pub use transience::Transience;
