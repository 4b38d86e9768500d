//! The agent-level error type and its transience table.

use serde::{Deserialize, Serialize};

use super::{LlmError, Transience};

/// An error from running a [`Paladin`](crate::paladin::Paladin) agent.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum PaladinError {
    /// The agent is misconfigured (no model, a bad template, ...).
    #[error("configuration error: {0}")]
    ConfigurationError(String),
    /// An untyped execution failure.
    #[error("execution error: {0}")]
    ExecutionError(String),
    /// The LLM provider failed.
    #[error(transparent)]
    Llm(LlmError),
    /// A circuit breaker above the port boundary is open.
    #[error("circuit breaker open: {0}")]
    CircuitBreakerOpen(String),
    /// An armament (tool) failed.
    #[error("armament `{armament}` failed: {message}")]
    ArmamentError {
        /// The armament's name.
        armament: String,
        /// What it reported.
        message: String,
    },
    /// The agent's output did not satisfy the node's output schema.
    #[error("output does not satisfy the output schema: {0}")]
    OutputSchemaViolation(String),
    /// The agent used all its loops without producing a final answer.
    #[error("max_loops ({0}) reached without a final answer")]
    MaxLoopsExceeded(u32),
}

impl PaladinError {
    /// Classifies this error from its typed fields, one arm per variant.
    pub fn transience(&self) -> Transience {
        match self {
            PaladinError::ConfigurationError(_) => Transience::Permanent,
            PaladinError::ExecutionError(_) => Transience::Unknown,
            PaladinError::Llm(e) => e.transience(),
            // The breaker half-opens again after its cool-down.
            PaladinError::CircuitBreakerOpen(_) => Transience::Transient,
            // A tool may fail for any reason; nothing typed says which.
            PaladinError::ArmamentError { .. } => Transience::Unknown,
            // Sampling may produce valid output on another try.
            PaladinError::OutputSchemaViolation(_) => Transience::Unknown,
            PaladinError::MaxLoopsExceeded(_) => Transience::Unknown,
        }
    }

    /// The provider's typed retry hint ([`LlmError::retry_after`]) for an
    /// [`PaladinError::Llm`] error; `None` otherwise.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            PaladinError::Llm(e) => e.retry_after(),
            _ => None,
        }
    }

    /// The variant's name, as `NodeErrorSource::Paladin { kind }` records it.
    pub fn kind(&self) -> &'static str {
        match self {
            PaladinError::ConfigurationError(_) => "ConfigurationError",
            PaladinError::ExecutionError(_) => "ExecutionError",
            PaladinError::Llm(_) => "Llm",
            PaladinError::CircuitBreakerOpen(_) => "CircuitBreakerOpen",
            PaladinError::ArmamentError { .. } => "ArmamentError",
            PaladinError::OutputSchemaViolation(_) => "OutputSchemaViolation",
            PaladinError::MaxLoopsExceeded(_) => "MaxLoopsExceeded",
        }
    }
}

impl From<LlmError> for PaladinError {
    fn from(e: LlmError) -> Self {
        PaladinError::Llm(e)
    }
}
