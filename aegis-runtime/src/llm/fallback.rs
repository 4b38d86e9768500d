//! The ordered model fallback chain.

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use super::deadlines::{StreamDeadlines, stall_limited};
use super::{
    CHAIN_POSITION_KEY, FALLBACK_KEY, LlmChunk, LlmPort, LlmRequest, LlmResponse, LlmStream,
    SERVED_BY_KEY,
};
use crate::error::{KnownSecrets, LlmError, ProviderAttempt, Transience};
use crate::share::IntoShared;
use crate::trace::{TraceEvent, TraceSink, ambient};

/// The provider name of every [`FallbackLlmAdapter`].
pub const FALLBACK_PROVIDER_NAME: &str = "fallback";

/// Why a fallback chain could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FallbackChainError {
    /// A chain needs at least one provider.
    #[error("a fallback chain needs at least one provider")]
    EmptyChain,
    /// A per-provider setting named a position the chain does not have.
    #[error("the fallback chain has {len} providers; there is no provider at position {index}")]
    NoSuchProvider {
        /// The position named.
        index: usize,
        /// How many providers the chain has.
        len: usize,
    },
}

/// An ordered chain of [`LlmPort`]s composed into one `LlmPort`.
///
/// * Every call starts at element 0: no state survives a call, so one call's
///   hop never changes where the next — or a concurrent one — starts.
/// * The chain moves on only when an element fails with a
///   [`Transient`](Transience::Transient) or
///   [`Unknown`](Transience::Unknown) error. A
///   [`Permanent`](Transience::Permanent) error short-circuits and is
///   returned unchanged: a malformed prompt or a rejected credential is never
///   re-sent to every provider.
/// * When every element fails, the call fails with
///   [`LlmError::AllProvidersFailed`]: one [`ProviderAttempt`] per element in
///   chain order (messages redacted and bounded) and the last error, whose
///   transience the whole error takes.
/// * Streaming follows the first-chunk rule: the chain falls through only if
///   the call fails or the stream's first item is an error (it peeks that
///   item, and still delivers a good one). Once a chunk has been delivered, a
///   later error propagates unchanged — a partial answer is never completed
///   by another model.
/// * An open circuit is never waited on: a [`CircuitBreaker`](crate::llm::CircuitBreaker)
///   refuses at once and the chain hops past it (Transient). The budget
///   rule of a node's retry applies to the chain as a whole: when every
///   element failed with a typed hint (an open circuit's remaining
///   cool-down, a 429's `Retry-After`), the chain's error carries the
///   shortest ([`LlmError::retry_after`]), so a `RetryPolicy` with
///   `respect_retry_after` waits until some element may answer, and when
///   that wait would end past the run budget or an enclosing deadline the
///   retry is skipped and the node's handler runs at once. An element that
///   failed without a hint may answer at once, so the chain then has none.
/// * Two stream deadlines bound each provider of a streamed call
///   ([`StreamDeadlines`], chain-wide with
///   [`FallbackLlmAdapter::with_stream_deadlines`], per provider with
///   [`FallbackLlmAdapter::with_provider_stream_deadlines`], a provider's own
///   winning): a provider that sends no first chunk within `first_chunk` is
///   a transient failure and the chain hops to the next one; a provider
///   that stalls for `idle` after a chunk fails the stream with a transient
///   [`LlmError::Timeout`] and the chain does not hop. A caller's
///   first-chunk deadline ([`LlmPort::generate_stream_within`], a node's
///   `timeout(first_chunk = ..)`) applies to providers without one of
///   their own.
/// * Each hop emits [`TraceEvent::FallbackHop`] to the sinks added with
///   [`FallbackLlmAdapter::with_trace_sink`], and a `warn!` naming both
///   providers. Called by a Paladin node, the hop also reaches the engine's
///   `Events` stream and trace sinks, naming the node (a sink added to both
///   the chain and the engine receives it once, from the engine).
/// * A served response (and every chunk of a served stream) carries the
///   serving element's name under `metadata["paladin.served_by"]`
///   ([`SERVED_BY_KEY`]) and its position in the chain under
///   [`CHAIN_POSITION_KEY`] (0 = the primary). An element that already
///   stamped them (a nested chain) keeps its own, so both are the innermost
///   provider's; [`FALLBACK_KEY`] is `true` when any chain on the way served
///   from a provider other than its first. Observability, not attestation.
/// * Secrets go by value: the chain knows every element's
///   [`LlmPort::known_secrets`] plus any registered with
///   [`FallbackLlmAdapter::with_secret`], and removes them from its
///   per-provider summaries, its hop log and every error it returns.
///
/// ```
/// use std::sync::Arc;
/// use aegis_runtime::llm::{FallbackLlmAdapter, LlmPort, MockLlmAdapter};
/// let primary: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("openai"));
/// let backup: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("ollama"));
/// let chain = FallbackLlmAdapter::new(vec![primary, backup]).unwrap();
/// assert_eq!(chain.get_provider_name(), "fallback");
/// assert!(FallbackLlmAdapter::new(vec![]).is_err());
/// ```
#[derive(Clone)]
pub struct FallbackLlmAdapter {
    chain: Vec<Arc<dyn LlmPort>>,
    sinks: Vec<Arc<dyn TraceSink>>,
    secrets: KnownSecrets,
    /// The chain-wide stream deadlines.
    deadlines: StreamDeadlines,
    /// Each element's own stream deadlines, in chain order.
    own_deadlines: Vec<StreamDeadlines>,
}

impl fmt::Debug for FallbackLlmAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackLlmAdapter")
            .field("chain", &self.provider_names())
            .field("trace_sinks", &self.sinks.len())
            .field("secrets", &self.secrets)
            .field("deadlines", &self.deadlines)
            .field("own_deadlines", &self.own_deadlines)
            .finish()
    }
}

impl FallbackLlmAdapter {
    /// A chain trying `chain` in order. An empty chain is an error.
    pub fn new(chain: Vec<Arc<dyn LlmPort>>) -> Result<Self, FallbackChainError> {
        if chain.is_empty() {
            return Err(FallbackChainError::EmptyChain);
        }
        let secrets = chain.iter().fold(KnownSecrets::default(), |all, p| {
            all.union(&p.known_secrets())
        });
        let own_deadlines = vec![StreamDeadlines::default(); chain.len()];
        Ok(FallbackLlmAdapter {
            chain,
            sinks: Vec::new(),
            secrets,
            deadlines: StreamDeadlines::default(),
            own_deadlines,
        })
    }

    /// Sets the stream deadlines of every provider that has none of its
    /// own ([`FallbackLlmAdapter::with_provider_stream_deadlines`]).
    pub fn with_stream_deadlines(mut self, deadlines: StreamDeadlines) -> Self {
        self.deadlines = deadlines;
        self
    }

    /// Sets the stream deadlines of the provider at `index` (0 = the
    /// primary); each bound it sets wins over the chain-wide one and the
    /// caller's. An index past the chain's end is
    /// [`FallbackChainError::NoSuchProvider`].
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use aegis_runtime::llm::{FallbackLlmAdapter, LlmPort, MockLlmAdapter, StreamDeadlines};
    /// let primary: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("openai"));
    /// let local: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("ollama"));
    /// let chain = FallbackLlmAdapter::new(vec![primary, local])
    ///     .unwrap()
    ///     .with_stream_deadlines(StreamDeadlines::none().with_idle(Duration::from_secs(10)))
    ///     // The hosted primary answers fast or not at all.
    ///     .with_provider_stream_deadlines(0, StreamDeadlines::none().with_first_chunk(Duration::from_secs(5)))
    ///     .unwrap();
    /// assert!(chain.clone().with_provider_stream_deadlines(2, StreamDeadlines::none()).is_err());
    /// ```
    pub fn with_provider_stream_deadlines(
        mut self,
        index: usize,
        deadlines: StreamDeadlines,
    ) -> Result<Self, FallbackChainError> {
        let len = self.own_deadlines.len();
        let slot = self
            .own_deadlines
            .get_mut(index)
            .ok_or(FallbackChainError::NoSuchProvider { index, len })?;
        *slot = deadlines;
        Ok(self)
    }

    /// The stream deadlines the provider at `index` gets when the caller
    /// asks for `first_chunk`.
    fn deadlines_at(&self, index: usize, first_chunk: Option<Duration>) -> StreamDeadlines {
        self.own_deadlines
            .get(index)
            .copied()
            .unwrap_or_default()
            .or(self.deadlines)
            .or(StreamDeadlines {
                first_chunk,
                idle: None,
            })
    }

    /// Registers a further secret removed by value from the chain's
    /// summaries, hop log and errors (its elements' keys are known already).
    pub fn with_secret(mut self, secret: impl AsRef<str>) -> Self {
        self.secrets = self.secrets.clone().with(secret);
        self
    }

    /// Adds a sink for [`TraceEvent::FallbackHop`] events.
    pub fn with_trace_sink(mut self, sink: impl IntoShared<dyn TraceSink>) -> Self {
        self.sinks.push(sink.into_shared());
        self
    }

    /// The elements' provider names, in chain order.
    pub fn provider_names(&self) -> Vec<&str> {
        self.chain.iter().map(|p| p.get_provider_name()).collect()
    }

    /// Records element `index`'s failure; returns the error back when it
    /// ends the call (it is Permanent).
    fn record(
        &self,
        index: usize,
        error: LlmError,
        attempts: &mut Vec<ProviderAttempt>,
    ) -> Result<LlmError, LlmError> {
        let transience = error.transience();
        attempts.push(ProviderAttempt {
            provider: self.chain[index].get_provider_name().to_string(),
            error: self.secrets.redact_excerpt(&error.to_string()),
            transience,
            retry_after: error.retry_after(),
        });
        if transience == Transience::Permanent {
            Err(error.scrubbed(&self.secrets))
        } else {
            Ok(error)
        }
    }

    /// Reports the move from element `to - 1`, which failed with `error`, to
    /// element `to`.
    fn hop(&self, to: usize, error: &LlmError) {
        let from = self.chain[to - 1].get_provider_name();
        let to = self.chain[to].get_provider_name();
        tracing::warn!(
            from_provider = from,
            to_provider = to,
            transience = %error.transience(),
            error = %self.secrets.redact_excerpt(&error.to_string()),
            "model fallback hop"
        );
        #[cfg(feature = "metrics")]
        if let Some(observer) = crate::trace::observe::observer() {
            observer.hop(from, to);
        }
        let hop = || TraceEvent::FallbackHop {
            node_id: None,
            from_provider: from.to_string(),
            to_provider: to.to_string(),
        };
        // Inside an engine attempt the hop also reaches the engine's
        // stream and sinks (with its node); a sink on both gets it once.
        let attempt = ambient::current();
        if let Some(attempt) = &attempt {
            attempt.emit(hop());
        }
        for sink in &self.sinks {
            if !attempt.as_ref().is_some_and(|a| a.covers(sink)) {
                sink.emit(hop());
            }
        }
    }
}

/// The span of one element's call: its provider and place in the chain.
fn provider_span(provider: &str, position: usize) -> tracing::Span {
    tracing::debug_span!(
        "aegis.llm.provider",
        gen_ai.system = provider,
        aegis.chain_position = position,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        aegis.transience = tracing::field::Empty,
    )
}

/// Records an element's failure on its span.
fn provider_failed(span: &tracing::Span, error: &LlmError) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    // The variant only: low-cardinality, and no provider text.
    if let crate::error::NodeErrorSource::Llm { kind, .. } =
        crate::error::NodeErrorSource::from(error)
    {
        span.record("error.type", kind);
    }
    span.record("aegis.transience", error.transience().to_string());
}

/// The error of a call whose every element failed.
fn all_failed(attempts: Vec<ProviderAttempt>, last: Option<LlmError>) -> LlmError {
    match last {
        Some(last) => LlmError::AllProvidersFailed {
            attempts,
            last: Box::new(last),
        },
        // `new` refuses an empty chain, so some element always ran.
        None => LlmError::InvalidRequest(FallbackChainError::EmptyChain.to_string()),
    }
}

fn stamp(metadata: &mut serde_json::Map<String, Value>, provider: &str, position: usize) {
    metadata
        .entry(SERVED_BY_KEY)
        .or_insert_with(|| Value::String(provider.to_string()));
    metadata
        .entry(CHAIN_POSITION_KEY)
        .or_insert_with(|| Value::from(position));
    let inner = metadata
        .get(FALLBACK_KEY)
        .and_then(Value::as_bool)
        .unwrap_or(false);
    metadata.insert(FALLBACK_KEY.to_string(), Value::Bool(inner || position > 0));
}

#[async_trait]
impl LlmPort for FallbackLlmAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let mut attempts = Vec::new();
        let mut failed = None;
        for (i, port) in self.chain.iter().enumerate() {
            if let Some(e) = &failed {
                self.hop(i, e);
            }
            let span = provider_span(port.get_provider_name(), i);
            match port.generate(request).instrument(span.clone()).await {
                Ok(mut response) => {
                    stamp(&mut response.metadata, port.get_provider_name(), i);
                    return Ok(response);
                }
                Err(e) => {
                    provider_failed(&span, &e);
                    failed = Some(self.record(i, e, &mut attempts)?);
                }
            }
        }
        Err(all_failed(attempts, failed).scrubbed(&self.secrets))
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        self.generate_stream_within(request, None).await
    }

    async fn generate_stream_within(
        &self,
        request: &LlmRequest,
        first_chunk: Option<Duration>,
    ) -> Result<LlmStream, LlmError> {
        let mut attempts = Vec::new();
        let mut failed = None;
        for (i, port) in self.chain.iter().enumerate() {
            if let Some(e) = &failed {
                self.hop(i, e);
            }
            let deadlines = self.deadlines_at(i, first_chunk);
            // The element bounds its own first chunk (a nested chain per
            // provider); the peek below then finds it already arrived.
            let span = provider_span(port.get_provider_name(), i);
            let error = match port
                .generate_stream_within(request, deadlines.first_chunk)
                .instrument(span.clone())
                .await
            {
                Err(e) => e,
                Ok(mut stream) => match stream.next().instrument(span.clone()).await {
                    Some(Err(e)) => e,
                    first => {
                        let name = port.get_provider_name();
                        let provider: Arc<str> = Arc::from(name);
                        let stamped = move |item: Result<LlmChunk, LlmError>| {
                            item.map(|mut c| {
                                stamp(&mut c.metadata, &provider, i);
                                c
                            })
                        };
                        let head = futures::stream::iter(first);
                        let stream =
                            stall_limited(name, Box::pin(head.chain(stream)), deadlines.idle);
                        return Ok(Box::pin(stream.map(stamped)));
                    }
                },
            };
            provider_failed(&span, &error);
            failed = Some(self.record(i, error, &mut attempts)?);
        }
        Err(all_failed(attempts, failed).scrubbed(&self.secrets))
    }

    fn get_provider_name(&self) -> &str {
        FALLBACK_PROVIDER_NAME
    }

    fn known_secrets(&self) -> KnownSecrets {
        self.secrets.clone()
    }
}
