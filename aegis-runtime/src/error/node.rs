//! The structured failure of one node, as every observer sees it.
//!
//! **Conversions keep transience.** `LlmError` and `PaladinError` become a
//! node's error without losing their classification: `?` on either inside a
//! [`StateNode`](crate::graph::StateNode) gives a [`StateNodeError`](StateNodeError) whose
//! `transience` is the error's own `transience()` (a 503 stays transient and
//! is retried, a 401 stays permanent and is not), and a Paladin node's
//! failure is a [`NodeError`] with the same `transience` beside a
//! [`NodeErrorSource`] built by `From<&LlmError>` / `From<&PaladinError>`
//! (the source holds the typed facts; the transience travels on the
//! `NodeError`, never re-derived from the message). `From<LlmError> for
//! PaladinError` wraps it as `PaladinError::Llm`, whose transience is the
//! wrapped error's.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::{LlmError, PaladinError, Transience};
use crate::id::NodeId;

/// Which bound cut a timed-out attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TimeoutKind {
    /// The per-attempt wall clock (`TimeoutPolicy::run_timeout`).
    Run,
    /// No heartbeat within `TimeoutPolicy::idle_timeout`.
    Idle,
    /// The run-level budget (`EngineLimits::run_timeout`) ran out; never retried.
    EngineRun,
}

impl fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutKind::Run => "run timeout",
            TimeoutKind::Idle => "idle timeout",
            TimeoutKind::EngineRun => "engine run budget",
        })
    }
}

/// Where a node failure came from, with its typed facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum NodeErrorSource {
    /// A Paladin (agent) error other than a provider error.
    Paladin {
        /// The `PaladinError` variant name.
        kind: String,
        /// Its message.
        message: String,
    },
    /// An LLM provider error.
    Llm {
        /// The HTTP status, when the provider answered with one.
        status: Option<u16>,
        /// The provider's name, when known.
        provider: Option<String>,
        /// The `LlmError` variant name.
        kind: String,
        /// The redacted, bounded message.
        message: String,
    },
    /// A Function node's error.
    Function {
        /// Its message.
        message: String,
    },
    /// The node panicked; the engine caught the panic and failed the
    /// attempt (`Unknown`: a panic says nothing about whether a retry helps).
    Panic {
        /// The panic payload when it was a string, else a fixed description.
        message: String,
    },
    /// The attempt was cut by a timeout.
    Timeout(TimeoutKind),
    /// The attempt was cancelled.
    Cancelled,
    /// A Battalion node's child run failed.
    Battalion {
        /// The child's thread.
        child_thread: String,
        /// Why it failed.
        message: String,
    },
    /// A `NodeInterceptor` failed the node; never retried.
    Interceptor {
        /// The interceptor's reason.
        message: String,
    },
}

impl fmt::Display for NodeErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeErrorSource::Paladin { kind, message } => write!(f, "paladin {kind}: {message}"),
            // The provider comes first, once: an `LlmError`'s message
            // already starts with it; one that does not (written by an
            // older version, or built by hand) gets it, and its status,
            // from the typed fields.
            NodeErrorSource::Llm {
                status,
                provider,
                message,
                ..
            } => {
                f.write_str("llm: ")?;
                let named = |p: &str| message.starts_with(p) || message.contains(&format!("{p}:"));
                if let Some(p) = provider.as_deref().filter(|p| !named(p)) {
                    write!(f, "{p}: ")?;
                    if let Some(s) = status.filter(|s| !message.contains(&format!("HTTP {s}"))) {
                        write!(f, "HTTP {s}: ")?;
                    }
                }
                f.write_str(message)
            }
            NodeErrorSource::Function { message } => f.write_str(message),
            NodeErrorSource::Panic { message } => write!(f, "node panicked: {message}"),
            NodeErrorSource::Timeout(kind) => write!(f, "{kind} elapsed"),
            NodeErrorSource::Cancelled => f.write_str("cancelled"),
            NodeErrorSource::Interceptor { message } => write!(f, "interceptor: {message}"),
            NodeErrorSource::Battalion {
                child_thread,
                message,
            } => write!(f, "child run `{child_thread}`: {message}"),
        }
    }
}

/// The typed facts only: the transience goes on the [`NodeError`] beside it
/// (the engine sets it from [`LlmError::transience`]).
impl From<&LlmError> for NodeErrorSource {
    fn from(e: &LlmError) -> Self {
        NodeErrorSource::Llm {
            status: e.status(),
            provider: e.provider().map(str::to_string),
            kind: llm_kind(e).to_string(),
            message: e.to_string(),
        }
    }
}

/// The typed facts only (an `Llm` error as `NodeErrorSource::Llm`): the
/// transience goes on the [`NodeError`] beside it (the engine sets it from
/// [`PaladinError::transience`]).
impl From<&PaladinError> for NodeErrorSource {
    fn from(e: &PaladinError) -> Self {
        match e {
            PaladinError::Llm(llm) => llm.into(),
            other => NodeErrorSource::Paladin {
                kind: other.kind().to_string(),
                message: other.to_string(),
            },
        }
    }
}

fn llm_kind(e: &LlmError) -> &'static str {
    match e {
        LlmError::ProviderError { .. } => "ProviderError",
        LlmError::AuthenticationError(_) => "AuthenticationError",
        LlmError::RateLimited { .. } => "RateLimited",
        LlmError::NetworkError(_) => "NetworkError",
        LlmError::Timeout(_) => "Timeout",
        LlmError::InvalidRequest(_) => "InvalidRequest",
        LlmError::ContextLengthExceeded(_) => "ContextLengthExceeded",
        LlmError::ContentFiltered(_) => "ContentFiltered",
        LlmError::ParseError(_) => "ParseError",
        LlmError::SpendBudgetExceeded(_) => "SpendBudgetExceeded",
        LlmError::QuotaExceeded(_) => "QuotaExceeded",
        LlmError::CircuitOpen { .. } => "CircuitOpen",
        LlmError::AllProvidersFailed { .. } => "AllProvidersFailed",
    }
}

/// The structured failure of a node under an Aegis.
///
/// The same value is on the failed waypoint (`WaypointStatus::Failed`), on
/// `RunOutcome::node_error()`, inside `EngineError::NodeFailed`, and is what
/// retry predicates and error handlers receive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeError {
    /// The failed node.
    pub node_id: NodeId,
    /// The attempt that produced this error, 1-indexed.
    pub attempt: u32,
    /// The error's classification.
    pub transience: Transience,
    /// Where it came from.
    pub source: NodeErrorSource,
    /// The provider's typed "not before" hint (a 429's `Retry-After`),
    /// carried from [`LlmError::retry_after`] / [`PaladinError::retry_after`]
    /// or a [`StateNodeError`](StateNodeError)'s own; read by a
    /// `RetryPolicy` with `respect_retry_after`. Absent in older waypoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<std::time::Duration>,
}

impl NodeError {
    /// An error of `node_id`'s attempt `attempt`.
    pub fn new(
        node_id: NodeId,
        attempt: u32,
        transience: Transience,
        source: NodeErrorSource,
    ) -> Self {
        NodeError {
            node_id,
            attempt,
            transience,
            source,
            retry_after: None,
        }
    }

    /// This error with the provider's retry hint `retry_after`.
    pub fn with_retry_after(mut self, retry_after: Option<std::time::Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` failed on attempt {} ({}): {}",
            self.node_id, self.attempt, self.transience, self.source
        )
    }
}

impl std::error::Error for NodeError {}

/// The error a [`StateNode`](crate::graph::StateNode) returns.
///
/// Its classification is a typed field: [`StateNodeError::new`] is
/// `Unknown`, [`StateNodeError::transient`] and [`StateNodeError::permanent`]
/// say which. The message is never parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct StateNodeError {
    /// What went wrong, for humans.
    pub message: String,
    /// How the retry predicate should treat it.
    pub transience: Transience,
    /// The provider's typed retry hint, kept by `?` on an [`LlmError`] or
    /// [`PaladinError`] (see [`NodeError::retry_after`]).
    pub retry_after: Option<std::time::Duration>,
}

impl StateNodeError {
    /// An error of unknown transience.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_transience(message, Transience::Unknown)
    }

    /// An error worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::with_transience(message, Transience::Transient)
    }

    /// An error not worth retrying.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::with_transience(message, Transience::Permanent)
    }

    /// An error with an explicit classification.
    pub fn with_transience(message: impl Into<String>, transience: Transience) -> Self {
        StateNodeError {
            message: message.into(),
            transience,
            retry_after: None,
        }
    }

    /// This error with a retry hint (say, a `Retry-After` the node read
    /// itself), honoured by a `RetryPolicy` with `respect_retry_after`.
    pub fn with_retry_after(mut self, retry_after: Option<std::time::Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }
}

impl From<String> for StateNodeError {
    fn from(message: String) -> Self {
        StateNodeError::new(message)
    }
}

impl From<&str> for StateNodeError {
    fn from(message: &str) -> Self {
        StateNodeError::new(message)
    }
}

impl From<crate::state::StateError> for StateNodeError {
    fn from(e: crate::state::StateError) -> Self {
        // Building a bad field name or value is a programming error.
        StateNodeError::permanent(e.to_string())
    }
}

/// Keeps the error's transience ([`LlmError::transience`]) and retry hint.
impl From<LlmError> for StateNodeError {
    fn from(e: LlmError) -> Self {
        StateNodeError::with_transience(e.to_string(), e.transience())
            .with_retry_after(e.retry_after())
    }
}

/// Keeps the error's transience ([`PaladinError::transience`]) and retry hint.
impl From<PaladinError> for StateNodeError {
    fn from(e: PaladinError) -> Self {
        StateNodeError::with_transience(e.to_string(), e.transience())
            .with_retry_after(e.retry_after())
    }
}

impl From<serde_json::Error> for StateNodeError {
    fn from(e: serde_json::Error) -> Self {
        StateNodeError::new(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm_errors() -> Vec<LlmError> {
        let status = |status| LlmError::ProviderError {
            provider: "p".into(),
            status,
            message: "m".into(),
            retry_after: None,
        };
        vec![
            status(503),
            status(429),
            status(400),
            LlmError::AuthenticationError("no".into()),
            LlmError::NetworkError("reset".into()),
            LlmError::Timeout("slow".into()),
            LlmError::ParseError("garbled".into()),
            LlmError::ContentFiltered("no".into()),
        ]
    }

    /// Issue 38: `llm (HTTP 401): authentication failed: p1: ...` beside
    /// `llm p2 (HTTP 500): p2 returned ...` put the provider in two
    /// different places; every variant now names it first, once.
    #[test]
    fn every_llm_error_names_its_provider_once_and_first() {
        let shown = |e: LlmError| NodeErrorSource::from(&e).to_string();
        let auth = super::super::redact::map_http_status("p1", 401, "bad key", &[]);
        assert_eq!(shown(auth), "llm: p1: authentication failed: bad key");
        let server = super::super::redact::map_http_status("p2", 500, "boom", &[]);
        assert_eq!(shown(server.clone()), "llm: p2: HTTP 500: boom");
        let open = LlmError::CircuitOpen {
            provider: "p3".into(),
            retry_after: None,
        };
        assert_eq!(shown(open), "llm: p3: circuit open");
        let all = LlmError::AllProvidersFailed {
            attempts: vec![],
            last: Box::new(server),
        };
        assert_eq!(
            shown(all),
            "llm: all 0 providers failed; last: p2: HTTP 500: boom"
        );
        // A message without the provider (an older version's, or built by
        // hand) still shows it, first, with the status.
        let old = NodeErrorSource::Llm {
            status: Some(503),
            provider: Some("openai".into()),
            kind: "ProviderError".into(),
            message: "upstream overloaded".into(),
        };
        assert_eq!(
            old.to_string(),
            "llm: openai: HTTP 503: upstream overloaded"
        );
    }

    #[test]
    fn converting_llm_and_paladin_errors_keeps_their_transience() {
        let mut seen = std::collections::BTreeSet::new();
        for e in llm_errors() {
            let t = e.transience();
            seen.insert(format!("{t:?}"));
            assert_eq!(StateNodeError::from(e.clone()).transience, t, "{e}");
            let p = PaladinError::from(e.clone());
            assert_eq!(p.transience(), t, "{e}");
            assert_eq!(StateNodeError::from(p).transience, t, "{e}");
        }
        assert_eq!(seen.len(), 3, "all three classes covered: {seen:?}");
        for p in [
            PaladinError::ConfigurationError("c".into()),
            PaladinError::CircuitBreakerOpen("open".into()),
            PaladinError::OutputSchemaViolation("v".into()),
        ] {
            assert_eq!(StateNodeError::from(p.clone()).transience, p.transience());
        }
    }
}
