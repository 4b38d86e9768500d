//! The provider-boundary error type and its transience table.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::{KnownSecrets, Transience};

/// What one provider of a fallback chain answered, kept in
/// [`LlmError::AllProvidersFailed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProviderAttempt {
    /// The provider's name, as its port reports it.
    pub provider: String,
    /// The provider's error, already redacted and bounded.
    pub error: String,
    /// The classification of that error.
    pub transience: Transience,
    /// That error's typed retry hint ([`LlmError::retry_after`]): a 429's
    /// `Retry-After`, an open circuit's remaining cool-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Duration>,
}

impl ProviderAttempt {
    /// Sets [`retry_after`](Self::retry_after): that error's typed retry hint
    /// ([`LlmError::retry_after`]): a 429's `Retry-After`, an open circuit's
    /// remaining cool-down.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: impl Into<Option<Duration>>) -> Self {
        self.retry_after = retry_after.into();
        self
    }
}

impl ProviderAttempt {
    /// `provider` failed with `error`, classified `transience`.
    pub fn new(
        provider: impl Into<String>,
        error: impl Into<String>,
        transience: Transience,
    ) -> Self {
        ProviderAttempt {
            provider: provider.into(),
            error: error.into(),
            transience,
            retry_after: None,
        }
    }
}

/// An error at the LLM provider boundary.
///
/// Adapters never collapse an HTTP status into a string: a non-2xx response
/// without a dedicated variant becomes [`LlmError::ProviderError`], whose
/// `status` is what [`LlmError::transience`] reads. Messages that carry
/// provider text have passed through `map_http_status` (redacted, then
/// bounded to 512 characters) before they get here.
///
/// The provider's name has one place in every message that names it: first,
/// followed by a colon (`openai: HTTP 500: ...`, `openai: authentication
/// failed: ...`, `openai: circuit open`), so a node error reads
/// `llm: openai: ...` whatever the variant.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum LlmError {
    /// A non-2xx response with no dedicated variant.
    #[error("{provider}: HTTP {status}: {message}")]
    ProviderError {
        /// The provider's name.
        provider: String,
        /// The HTTP status code.
        status: u16,
        /// The redacted, bounded response excerpt.
        message: String,
        /// The parsed `Retry-After` hint, when the response sent one (a
        /// 503 often does); see [`LlmError::retry_after`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },
    /// The provider rejected the credential (HTTP 401, or an equivalent).
    /// The text is the whole message: adapters write `{provider}:
    /// authentication failed: {detail}` (the provider first, as in every
    /// message naming one).
    #[error("{0}")]
    AuthenticationError(String),
    /// The provider is rate limiting this caller (HTTP 429).
    #[error("rate limited{}", retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    RateLimited {
        /// The parsed `Retry-After` hint, when the provider sent one.
        retry_after: Option<Duration>,
    },
    /// The connection failed before a response arrived.
    #[error("network error: {0}")]
    NetworkError(String),
    /// The request timed out at the transport.
    #[error("request timed out: {0}")]
    Timeout(String),
    /// The provider rejected the request as malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The prompt does not fit the model's context window.
    #[error("context length exceeded: {0}")]
    ContextLengthExceeded(String),
    /// The provider refused to produce content for this prompt.
    #[error("content filtered: {0}")]
    ContentFiltered(String),
    /// The response (JSON or SSE) could not be parsed.
    #[error("could not parse the provider response: {0}")]
    ParseError(String),
    /// A circuit breaker in front of one provider is open.
    #[error("{provider}: circuit open")]
    CircuitOpen {
        /// The provider the breaker guards.
        provider: String,
        /// How long until the breaker lets a probe through: its remaining
        /// cool-down ([`Duration::MAX`] when it never will), `None` while a
        /// probe is in flight. A typed hint like a 429's `Retry-After`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },
    /// Not sent: its expected spend would pass what is left of the run's
    /// budget or the node's cap (or, for a fallback hop, the provider is
    /// dearer than the primary beyond the configured ratio). Permanent:
    /// retrying spends more of what is not there.
    #[error("spend budget: {0}")]
    SpendBudgetExceeded(String),
    /// The provider account is out of quota or credit (OpenAI's 429
    /// `insufficient_quota`): Permanent, since no wait refills it — though a
    /// fallback chain still hops past it, the next provider billing another
    /// account.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// Every provider of a fallback chain failed.
    #[error("all {} providers failed; last: {last}", attempts.len())]
    AllProvidersFailed {
        /// One summary per provider tried, in chain order.
        attempts: Vec<ProviderAttempt>,
        /// The last provider's error; the chain's transience is exactly its.
        last: Box<LlmError>,
    },
}

impl LlmError {
    /// Classifies this error from its typed fields, one arm per variant.
    ///
    /// For [`LlmError::ProviderError`] see [`status_transience`].
    pub fn transience(&self) -> Transience {
        match self {
            LlmError::ProviderError { status, .. } => status_transience(*status),
            LlmError::AuthenticationError(_) => Transience::Permanent,
            LlmError::RateLimited { .. } => Transience::Transient,
            LlmError::NetworkError(_) => Transience::Transient,
            LlmError::Timeout(_) => Transience::Transient,
            LlmError::InvalidRequest(_) => Transience::Permanent,
            LlmError::ContextLengthExceeded(_) => Transience::Permanent,
            LlmError::ContentFiltered(_) => Transience::Permanent,
            LlmError::SpendBudgetExceeded(_) => Transience::Permanent,
            LlmError::QuotaExceeded(_) => Transience::Permanent,
            // A garbled body is as likely a truncated transfer as a provider bug.
            LlmError::ParseError(_) => Transience::Unknown,
            // An open breaker closes again: a fallback chain must hop past it.
            LlmError::CircuitOpen { .. } => Transience::Transient,
            LlmError::AllProvidersFailed { last, .. } => last.transience(),
        }
    }

    /// The HTTP status this error carries, if any (used by `NodeErrorSource::Llm`).
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::ProviderError { status, .. } => Some(*status),
            LlmError::AuthenticationError(_) => Some(401),
            LlmError::RateLimited { .. } | LlmError::QuotaExceeded(_) => Some(429),
            LlmError::AllProvidersFailed { last, .. } => last.status(),
            _ => None,
        }
    }

    /// This error with every secret of `secrets` removed from the text it
    /// carries (per-provider summaries and the last error included): the
    /// last pass an adapter applies to whatever it returns.
    pub fn scrubbed(self, secrets: &KnownSecrets) -> LlmError {
        if secrets.is_empty() {
            return self;
        }
        let s = |text: String| secrets.scrub(&text);
        match self {
            LlmError::ProviderError {
                provider,
                status,
                message,
                retry_after,
            } => LlmError::ProviderError {
                provider,
                status,
                message: s(message),
                retry_after,
            },
            LlmError::AuthenticationError(m) => LlmError::AuthenticationError(s(m)),
            LlmError::NetworkError(m) => LlmError::NetworkError(s(m)),
            LlmError::Timeout(m) => LlmError::Timeout(s(m)),
            LlmError::InvalidRequest(m) => LlmError::InvalidRequest(s(m)),
            LlmError::ContextLengthExceeded(m) => LlmError::ContextLengthExceeded(s(m)),
            LlmError::ContentFiltered(m) => LlmError::ContentFiltered(s(m)),
            LlmError::ParseError(m) => LlmError::ParseError(s(m)),
            LlmError::SpendBudgetExceeded(m) => LlmError::SpendBudgetExceeded(s(m)),
            LlmError::QuotaExceeded(m) => LlmError::QuotaExceeded(s(m)),
            LlmError::AllProvidersFailed { attempts, last } => LlmError::AllProvidersFailed {
                attempts: attempts
                    .into_iter()
                    .map(|a| ProviderAttempt {
                        error: s(a.error),
                        ..a
                    })
                    .collect(),
                last: Box::new(last.scrubbed(secrets)),
            },
            e @ (LlmError::RateLimited { .. } | LlmError::CircuitOpen { .. }) => e,
        }
    }

    /// The provider's typed "not before" hint, if this error carries one:
    /// a 429's parsed `Retry-After` ([`LlmError::RateLimited`]), that of
    /// any other status that sent one ([`LlmError::ProviderError`]), an open
    /// breaker's remaining cool-down ([`LlmError::CircuitOpen`]). For
    /// [`LlmError::AllProvidersFailed`] it is the soonest any element may
    /// answer again: the shortest of the elements' hints when every element
    /// gave one, and none as soon as one element failed without a hint (it
    /// may answer at once). A `RetryPolicy` with `respect_retry_after` waits
    /// at least this long (capped) before the next attempt, and a wait past
    /// the run budget skips the retry. Never parsed from a message.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after }
            | LlmError::ProviderError { retry_after, .. }
            | LlmError::CircuitOpen { retry_after, .. } => *retry_after,
            LlmError::AllProvidersFailed { attempts, last } if attempts.is_empty() => {
                last.retry_after()
            }
            LlmError::AllProvidersFailed { attempts, .. } => attempts
                .iter()
                .map(|a| a.retry_after)
                .collect::<Option<Vec<_>>>()
                .and_then(|hints| hints.into_iter().min()),
            _ => None,
        }
    }

    /// The provider named by this error, if it names one.
    pub fn provider(&self) -> Option<&str> {
        match self {
            LlmError::ProviderError { provider, .. } | LlmError::CircuitOpen { provider, .. } => {
                Some(provider)
            }
            LlmError::AllProvidersFailed { last, .. } => last.provider(),
            _ => None,
        }
    }
}

/// The transience of an HTTP status code.
///
/// * 408 (request timeout), 425 (too early), 429 (too many requests) and every
///   5xx are **Transient**: the server says "not now", not "never".
/// * 400, 401, 403, 404 and 422 are **Permanent**: the request itself, or the
///   credential, is wrong and resending it cannot help.
/// * Every other 4xx (405, 409, 410, 413, ...) is **Permanent** too: a client
///   error describes the request, and no 4xx outside the transient list is
///   defined as temporary.
/// * Anything else (1xx, 3xx a client failed to follow, a 2xx that still
///   failed, a non-standard code) is **Unknown**: nothing typed says which.
#[doc(hidden)]
pub fn status_transience(status: u16) -> Transience {
    match status {
        408 | 425 | 429 => Transience::Transient,
        500..=599 => Transience::Transient,
        400 | 401 | 403 | 404 | 422 => Transience::Permanent,
        402..=499 => Transience::Permanent,
        _ => Transience::Unknown,
    }
}
