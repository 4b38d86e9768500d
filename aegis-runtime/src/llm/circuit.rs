//! A circuit breaker around one [`LlmPort`], for use inside a fallback chain.

use async_trait::async_trait;
use futures::StreamExt;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use super::{LlmPort, LlmRequest, LlmResponse, LlmStream};
use crate::error::{KnownSecrets, LlmError, Transience};
use crate::share::IntoShared;

/// When a [`CircuitBreaker`] opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitBreakerConfig {
    /// Consecutive failures that open the circuit (at least 1).
    pub failure_threshold: u32,
    /// How long an open circuit refuses calls before letting one probe through.
    ///
    /// Any `Duration` is accepted. A cool-down too long for a
    /// [`tokio::time::Instant`] to represent (`Duration::MAX`, say) means the
    /// circuit, once open, stays open for the breaker's lifetime: no probe is
    /// ever let through.
    pub cool_down: Duration,
}

impl CircuitBreakerConfig {
    /// Sets [`failure_threshold`](Self::failure_threshold): consecutive failures that open the circuit (at least 1).
    #[must_use]
    pub fn with_failure_threshold(mut self, failure_threshold: u32) -> Self {
        self.failure_threshold = failure_threshold;
        self
    }

    /// Sets [`cool_down`](Self::cool_down): how long an open circuit refuses calls before letting one probe through.
    #[must_use]
    pub fn with_cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down;
        self
    }
}

impl Default for CircuitBreakerConfig {
    /// Five failures in a row open the circuit for thirty seconds.
    fn default() -> Self {
        CircuitBreakerConfig {
            failure_threshold: 5,
            cool_down: Duration::from_secs(30),
        }
    }
}

/// The breaker's state, as [`CircuitBreaker::state`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls pass; this many consecutive failures so far.
    Closed {
        /// Consecutive failures.
        failures: u32,
    },
    /// Calls are refused until the instant passes.
    Open {
        /// When the next probe may go through; `None` when the cool-down is
        /// too long for an `Instant` to hold: the circuit stays open.
        until: Option<Instant>,
    },
    /// One probe call is in flight; every other call is refused.
    HalfOpen,
}

/// Wraps one [`LlmPort`] and stops calling it after repeated failures.
///
/// After `failure_threshold` consecutive failures of Transient or Unknown
/// transience (an overloaded or unreachable provider — a Permanent error
/// says the *request* is wrong and is not held against the provider), the
/// circuit opens: calls fail at once with [`LlmError::CircuitOpen`], which
/// is **Transient**, so a [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter)
/// hops past the provider without waiting on it. After `cool_down` one probe
/// call goes through (half-open): its success closes the circuit, its failure
/// opens it for another `cool_down`. A refusal carries the remaining
/// cool-down as its typed hint (`CircuitOpen::retry_after`), so a node whose
/// chain is all open can wait it out, or skip a retry the budget cannot
/// hold (see [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter)). A streamed call counts as a success once
/// its first item is a chunk (the breaker peeks it, like the chain does).
///
/// The clock is tokio's, so cool-downs are testable on a paused clock. The
/// breaker reports the wrapped port's provider name (and its secrets).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use aegis_runtime::llm::{CircuitBreaker, MockLlmAdapter};
/// let cb = CircuitBreaker::new(MockLlmAdapter::new())
///     .with_failure_threshold(3)
///     .with_cool_down(Duration::from_secs(10));
/// assert_eq!(cb.config().failure_threshold, 3);
/// assert_eq!(cb.config().cool_down, Duration::from_secs(10));
/// ```
pub struct CircuitBreaker {
    inner: Arc<dyn LlmPort>,
    config: CircuitBreakerConfig,
    state: Arc<Mutex<CircuitState>>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("provider", &self.inner.get_provider_name())
            .field("config", &self.config)
            .field("state", &self.state())
            .finish()
    }
}

/// Permission to make one call; reports its outcome to the breaker. A call
/// dropped before it reported (a cancelled probe) leaves the circuit open but
/// immediately probe-able, never stuck half-open.
struct Permit {
    state: Arc<Mutex<CircuitState>>,
    config: CircuitBreakerConfig,
    probe: bool,
    reported: bool,
}

fn lock(state: &Mutex<CircuitState>) -> MutexGuard<'_, CircuitState> {
    // The state is a plain value; a poisoned lock still holds a valid one.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Permit {
    fn report(mut self, outcome: Result<(), Transience>) {
        self.reported = true;
        let mut state = lock(&self.state);
        match outcome {
            Ok(()) => *state = CircuitState::Closed { failures: 0 },
            // A Permanent failure says nothing about the provider's health:
            // a probe that got one still proves the provider answers.
            Err(Transience::Permanent) => {
                if self.probe {
                    *state = CircuitState::Closed { failures: 0 };
                }
            }
            Err(_) => {
                let failures = match *state {
                    CircuitState::Closed { failures } if !self.probe => failures.saturating_add(1),
                    _ => self.config.failure_threshold,
                };
                *state = if failures >= self.config.failure_threshold {
                    CircuitState::Open {
                        // Checked: `Instant + Duration::MAX` panics.
                        until: Instant::now().checked_add(self.config.cool_down),
                    }
                } else {
                    CircuitState::Closed { failures }
                };
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            *lock(&self.state) = CircuitState::Open {
                until: Some(Instant::now()),
            };
        }
    }
}

impl CircuitBreaker {
    /// A breaker around `inner` with the default configuration.
    pub fn new(inner: impl IntoShared<dyn LlmPort>) -> Self {
        Self::with_config(inner, CircuitBreakerConfig::default())
    }

    /// A breaker around `inner` with `config` (a threshold of 0 counts as 1).
    pub fn with_config(
        inner: impl IntoShared<dyn LlmPort>,
        mut config: CircuitBreakerConfig,
    ) -> Self {
        config.failure_threshold = config.failure_threshold.max(1);
        CircuitBreaker {
            inner: inner.into_shared(),
            config,
            state: Arc::new(Mutex::new(CircuitState::Closed { failures: 0 })),
        }
    }

    /// Opens the circuit after `failures` consecutive failures (0 counts
    /// as 1).
    pub fn with_failure_threshold(mut self, failures: u32) -> Self {
        self.config.failure_threshold = failures.max(1);
        self
    }

    /// Keeps an open circuit closed to calls for `cool_down` before one
    /// probe goes through; any `Duration` (see
    /// [`CircuitBreakerConfig::cool_down`]).
    pub fn with_cool_down(mut self, cool_down: Duration) -> Self {
        self.config.cool_down = cool_down;
        self
    }

    /// The configuration in force.
    pub fn config(&self) -> CircuitBreakerConfig {
        self.config
    }

    /// The current state.
    pub fn state(&self) -> CircuitState {
        *lock(&self.state)
    }

    /// Tells the metrics observer, if one is installed, the state now.
    #[inline]
    fn observed(&self) {
        #[cfg(feature = "metrics")]
        if let Some(observer) = crate::trace::observe::observer() {
            let state = match self.state() {
                CircuitState::Closed { .. } => "closed",
                CircuitState::Open { .. } => "open",
                CircuitState::HalfOpen => "half_open",
            };
            observer.breaker(self.inner.get_provider_name(), state);
        }
    }

    fn admit(&self) -> Result<Permit, LlmError> {
        let mut state = lock(&self.state);
        let probe = match *state {
            CircuitState::Closed { .. } => false,
            CircuitState::Open { until: Some(until) } if Instant::now() >= until => {
                *state = CircuitState::HalfOpen;
                true
            }
            CircuitState::Open { until } => {
                return Err(LlmError::CircuitOpen {
                    provider: self.inner.get_provider_name().to_string(),
                    retry_after: Some(until.map_or(Duration::MAX, |u| {
                        u.saturating_duration_since(Instant::now())
                    })),
                });
            }
            CircuitState::HalfOpen => {
                return Err(LlmError::CircuitOpen {
                    provider: self.inner.get_provider_name().to_string(),
                    retry_after: None,
                });
            }
        };
        Ok(Permit {
            state: self.state.clone(),
            config: self.config,
            probe,
            reported: false,
        })
    }
}

#[async_trait]
impl LlmPort for CircuitBreaker {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let permit = self.admit()?;
        self.observed();
        let result = self.inner.generate(request).await;
        permit.report(result.as_ref().map(|_| ()).map_err(LlmError::transience));
        self.observed();
        result
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let permit = self.admit()?;
        self.observed();
        let mut stream = match self.inner.generate_stream(request).await {
            Ok(s) => s,
            Err(e) => {
                permit.report(Err(e.transience()));
                self.observed();
                return Err(e);
            }
        };
        let first = stream.next().await;
        permit.report(match &first {
            Some(Err(e)) => Err(e.transience()),
            _ => Ok(()),
        });
        self.observed();
        Ok(Box::pin(futures::stream::iter(first).chain(stream)))
    }

    fn get_provider_name(&self) -> &str {
        self.inner.get_provider_name()
    }

    fn known_secrets(&self) -> KnownSecrets {
        self.inner.known_secrets()
    }
}
