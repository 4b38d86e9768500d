//! The error taxonomy: transience, provider and agent errors, node errors and
//! engine errors.

mod engine;
mod llm;
mod node;
mod paladin;
mod redact;
mod transience;

pub use engine::{EdgeRef, EngineError, PolicyOffender};
pub use llm::{LlmError, ProviderAttempt, status_transience};
pub use node::{NodeError, NodeErrorSource, StateNodeError, TimeoutKind};
pub use paladin::PaladinError;
pub use redact::{
    EXCERPT_LIMIT, REDACTED, bound_excerpt, map_http_status, parse_retry_after, redact_excerpt,
    redact_secrets, retry_after_hint,
};
pub use transience::Transience;
