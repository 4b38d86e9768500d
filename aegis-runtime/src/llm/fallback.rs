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
    SERVED_BY_KEY, SERVED_MODEL_KEY,
};
use crate::error::{KnownSecrets, LlmError, ProviderAttempt, Transience};
use crate::graph::SpendMeter;
use crate::policy::hop::HopNote;
use crate::policy::{Money, Skip, SkipReason, SkippedStep, Spend};
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
/// * **Checks before a hop.** Before calling a provider the chain skips it,
///   without sending, when the request cannot fit its declared context
///   window ([`LlmPort::context_window`]; the primary too), and — inside an
///   engine run with a spend budget
///   ([`SpendBudget`](crate::policy::SpendBudget)) — when the hop's expected
///   spend (the estimated prompt plus `max_tokens`, priced by the run's
///   [`PriceTable`](crate::policy::PriceTable)) would pass what is left, or
///   its input or output price is more than the budget's
///   `max_hop_price_ratio` times the primary's. Each skip is a [`TraceEvent::StepSkipped`] (to the
///   chain's sinks, and on the node's record and the engine's trace), and
///   the chain moves on; a chain that ends on a skip fails with its typed
///   error ([`LlmError::ContextLengthExceeded`],
///   [`LlmError::SpendBudgetExceeded`], both Permanent: the node's handler
///   runs, no retry).
/// * **Authentication failures** (401/403) are Permanent and stop the chain,
///   as the guide says, unless the failing provider opted in with
///   [`FallbackLlmAdapter::with_provider_hop_on_auth`]: then a rejected
///   credential at that provider is a reason to try the next one, which has
///   its own key. A deviation from the guide's default, for multi-vendor
///   chains whose keys are revoked independently. An exhausted account
///   ([`LlmError::QuotaExceeded`], Permanent so never retried) always hops:
///   the next provider bills another one.
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
    /// Whether each element's authentication failure hops, in chain order.
    hop_on_auth: Vec<bool>,
}

impl fmt::Debug for FallbackLlmAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackLlmAdapter")
            .field("chain", &self.provider_names())
            .field("trace_sinks", &self.sinks.len())
            .field("secrets", &self.secrets)
            .field("deadlines", &self.deadlines)
            .field("own_deadlines", &self.own_deadlines)
            .field("hop_on_auth", &self.hop_on_auth)
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
        let hop_on_auth = vec![false; chain.len()];
        Ok(FallbackLlmAdapter {
            chain,
            sinks: Vec::new(),
            secrets,
            deadlines: StreamDeadlines::default(),
            own_deadlines,
            hop_on_auth,
        })
    }

    /// Lets an authentication failure (HTTP 401 or 403, an
    /// [`LlmError::AuthenticationError`]) of the provider at `index` hop to
    /// the next provider instead of ending the call (`on = true`).
    ///
    /// **A deviation from the guide**, opt-in per provider: by default a
    /// rejected credential is Permanent and stops the chain. Opt in where
    /// the next provider has its own key (another vendor), so one revoked
    /// key does not take the whole chain down. An index past the chain's
    /// end is [`FallbackChainError::NoSuchProvider`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use aegis_runtime::llm::{FallbackLlmAdapter, LlmPort, MockLlmAdapter};
    /// let openai: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("openai"));
    /// let claude: Arc<dyn LlmPort> = Arc::new(MockLlmAdapter::new().with_provider_name("anthropic"));
    /// let chain = FallbackLlmAdapter::new(vec![openai, claude])
    ///     .unwrap()
    ///     .with_provider_hop_on_auth(0, true)
    ///     .unwrap();
    /// assert!(chain.with_provider_hop_on_auth(5, true).is_err());
    /// ```
    pub fn with_provider_hop_on_auth(
        mut self,
        index: usize,
        on: bool,
    ) -> Result<Self, FallbackChainError> {
        let len = self.hop_on_auth.len();
        let slot = self
            .hop_on_auth
            .get_mut(index)
            .ok_or(FallbackChainError::NoSuchProvider { index, len })?;
        *slot = on;
        Ok(self)
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
        let auth_hop =
            self.hop_on_auth.get(index).copied().unwrap_or(false) && is_auth_failure(&error);
        // An exhausted account is no reason to stop: the next provider
        // bills another one.
        let account_hop = (auth_hop || matches!(error, LlmError::QuotaExceeded(_)))
            && index + 1 < self.chain.len();
        if transience == Transience::Permanent && !account_hop {
            Err(error.scrubbed(&self.secrets))
        } else {
            Ok(error)
        }
    }

    /// Why element `index` is not to be called for `request`, if it is not:
    /// the request does not fit its context window, or (a hop, inside a
    /// metered run) it is too dear next to the primary or its expected
    /// spend would pass what is left.
    fn skip_reason(
        &self,
        index: usize,
        request: &LlmRequest,
        meter: &SpendMeter,
    ) -> Option<SkipReason> {
        let port = self.chain.get(index)?;
        if let Some(window) = port.context_window() {
            let needed = super::estimate::window_tokens(request);
            if needed > window {
                return Some(SkipReason::ContextWindow {
                    estimated_tokens: needed,
                    window,
                });
            }
        }
        if index == 0 || !meter.is_active() {
            return None;
        }
        let prompt = super::estimate::prompt_tokens(request);
        let output = u64::from(request.max_tokens.unwrap_or(0));
        let expected_cost = |p: &Arc<dyn LlmPort>| {
            let model = p.model_name().unwrap_or(&request.model);
            meter
                .price(p.get_provider_name(), model)
                .map(|price| price.cost(prompt, output))
        };
        let price_of = |p: &Arc<dyn LlmPort>| {
            let model = p.model_name().unwrap_or(&request.model);
            meter.price(p.get_provider_name(), model)
        };
        if let (Some(max), Some(primary), Some(candidate)) = (
            meter.max_hop_price_ratio_permille(),
            self.chain.first().and_then(price_of),
            price_of(port),
        ) && candidate.exceeds(&primary, max)
        {
            return Some(SkipReason::PriceRatio {
                primary,
                candidate,
                max_ratio_permille: max,
            });
        }
        let candidate = expected_cost(port);
        let remaining = meter.remaining()?;
        let expected =
            Spend::new(prompt, output, candidate.unwrap_or(Money::ZERO)).with_estimated(true);
        (!remaining.fits(&expected)).then_some(SkipReason::SpendBudget {
            expected,
            remaining,
        })
    }

    /// Reports element `index` skipped for `reason`; returns the error it
    /// stands for.
    fn skipped(
        &self,
        index: usize,
        reason: SkipReason,
        meter: &SpendMeter,
        attempts: &mut Vec<ProviderAttempt>,
    ) -> LlmError {
        let provider = self.chain[index].get_provider_name();
        let skip = Skip::new(
            SkippedStep::Hop {
                provider: provider.to_string(),
                position: u32::try_from(index).unwrap_or(u32::MAX),
            },
            reason,
        );
        let message = format!("{provider}: skipped: {}", skip.reason);
        tracing::warn!(provider, reason = %skip.reason, "fallback provider skipped");
        let error = match &skip.reason {
            SkipReason::ContextWindow { .. } => LlmError::ContextLengthExceeded(message),
            _ => LlmError::SpendBudgetExceeded(message),
        };
        attempts.push(ProviderAttempt {
            provider: provider.to_string(),
            error: self.secrets.redact_excerpt(&error.to_string()),
            transience: error.transience(),
            retry_after: None,
        });
        for sink in &self.sinks {
            sink.emit(TraceEvent::StepSkipped {
                thread_id: None,
                superstep: None,
                node_id: None,
                task_key: None,
                skip: skip.clone(),
            });
        }
        meter.skipped(skip);
        error
    }

    /// Reports the move from element `from`, which failed with `error`, to
    /// element `to`.
    fn hop(&self, from: usize, to: usize, error: &LlmError, meter: &SpendMeter) {
        let position = to;
        let from = self.chain[from].get_provider_name();
        let to = self.chain[to].get_provider_name();
        let excerpt = self.secrets.redact_excerpt(&error.to_string());
        tracing::warn!(
            from_provider = from,
            to_provider = to,
            transience = %error.transience(),
            error = %excerpt,
            "model fallback hop"
        );
        // On the attempt's record too (inside an engine attempt), so the
        // run read from its waypoints alone shows the hop.
        meter.hopped(|| {
            let reason = match crate::error::NodeErrorSource::from(error) {
                crate::error::NodeErrorSource::Llm { kind, .. } => format!("{kind}: {excerpt}"),
                _ => excerpt,
            };
            HopNote::new(0, from, to, position, error.transience(), reason)
        });
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

/// Whether `error` is a rejected credential (401, or 403 forbidden).
fn is_auth_failure(error: &LlmError) -> bool {
    matches!(error, LlmError::AuthenticationError(_)) || matches!(error.status(), Some(401 | 403))
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

fn stamp(
    metadata: &mut serde_json::Map<String, Value>,
    provider: &str,
    model: Option<&str>,
    position: usize,
) {
    metadata
        .entry(SERVED_BY_KEY)
        .or_insert_with(|| Value::String(provider.to_string()));
    if let Some(model) = model {
        metadata
            .entry(SERVED_MODEL_KEY)
            .or_insert_with(|| Value::String(model.to_string()));
    }
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
        let mut tried = None;
        let meter = SpendMeter::current();
        for (i, port) in self.chain.iter().enumerate() {
            if let Some(reason) = self.skip_reason(i, request, &meter) {
                failed = Some(self.skipped(i, reason, &meter, &mut attempts));
                continue;
            }
            if let (Some(e), Some(from)) = (&failed, tried) {
                self.hop(from, i, e, &meter);
            }
            tried = Some(i);
            let span = provider_span(port.get_provider_name(), i);
            match port.generate(request).instrument(span.clone()).await {
                Ok(mut response) => {
                    stamp(
                        &mut response.metadata,
                        port.get_provider_name(),
                        port.model_name(),
                        i,
                    );
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
        let mut tried = None;
        let meter = SpendMeter::current();
        for (i, port) in self.chain.iter().enumerate() {
            if let Some(reason) = self.skip_reason(i, request, &meter) {
                failed = Some(self.skipped(i, reason, &meter, &mut attempts));
                continue;
            }
            if let (Some(e), Some(from)) = (&failed, tried) {
                self.hop(from, i, e, &meter);
            }
            tried = Some(i);
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
                        let model: Option<Arc<str>> = port.model_name().map(Arc::from);
                        let stamped = move |item: Result<LlmChunk, LlmError>| {
                            item.map(|mut c| {
                                stamp(&mut c.metadata, &provider, model.as_deref(), i);
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
