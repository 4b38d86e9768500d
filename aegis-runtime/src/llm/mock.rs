//! A scriptable, deterministic [`LlmPort`] for tests and examples.

use async_trait::async_trait;
use futures::StreamExt;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::types::ResponseBuilder;
use super::{LlmChunk, LlmPort, LlmRequest, LlmResponse, LlmStream, ToolCall};
use crate::error::LlmError;

/// The text a mock answers with once its script is empty, unless
/// [`MockLlmAdapter::with_default_response`] says otherwise.
pub const MOCK_DEFAULT_RESPONSE: &str = "mock response";

/// One step of a scripted chunk stream.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MockStreamStep {
    /// Deliver this item. The stream ends after the first error.
    Item(Result<LlmChunk, LlmError>),
    /// Wait this long (on tokio's clock, so paused-clock tests control it).
    Pause(Duration),
    /// Never deliver anything again: a stalled provider.
    Stall,
}

#[derive(Debug, Clone)]
enum Outcome {
    Response(LlmResponse),
    Error(LlmError),
    Stream(Vec<MockStreamStep>),
}

#[derive(Debug, Clone)]
struct Scripted {
    delay: Duration,
    outcome: Outcome,
}

#[derive(Debug)]
struct State {
    script: VecDeque<Scripted>,
    pending_delay: Duration,
    default_response: String,
    calls: usize,
    requests: Vec<LlmRequest>,
}

/// A scriptable [`LlmPort`].
///
/// Every call — [`LlmPort::generate`] or [`LlmPort::generate_stream`] —
/// consumes the next scripted outcome, in the order the builder methods
/// added them. **When the script is empty** (never scripted, or used up),
/// every further call answers with the default response
/// ([`MOCK_DEFAULT_RESPONSE`], or [`MockLlmAdapter::with_default_response`]),
/// so an unscripted mock is a working provider; use
/// [`MockLlmAdapter::remaining`] and [`MockLlmAdapter::call_count`] to check
/// that a test used exactly the script it wrote.
///
/// How an outcome meets each call:
///
/// | outcome | `generate` | `generate_stream` |
/// |---|---|---|
/// | response | the response | a one-chunk stream |
/// | error | the error | the call fails with it |
/// | stream | the chunks folded into one response, or the first error | the stream, step by step |
///
/// Clones share one script and one counter.
///
/// ```
/// use aegis_runtime::{error::LlmError, llm::{LlmMessage, LlmPort, LlmRequest, MockLlmAdapter}};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let mock = MockLlmAdapter::new()
///     .with_provider_name("openai")
///     .with_error(LlmError::NetworkError("reset".into()))
///     .with_response("hello");
/// let request = LlmRequest::new("gpt", vec![LlmMessage::user("hi")]);
/// assert!(mock.generate(&request).await.is_err());
/// assert_eq!(mock.generate(&request).await.unwrap().content, "hello");
/// assert_eq!(mock.call_count(), 2);
/// # });
/// ```
#[derive(Clone)]
pub struct MockLlmAdapter {
    provider: String,
    state: Arc<Mutex<State>>,
    /// The declared context window, if any.
    context_window: Option<u64>,
    /// The model it calls whatever the request names, if any.
    model: Option<String>,
}

impl fmt::Debug for MockLlmAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockLlmAdapter")
            .field("provider", &self.provider)
            .field("remaining", &self.remaining())
            .field("calls", &self.call_count())
            .finish()
    }
}

impl Default for MockLlmAdapter {
    fn default() -> Self {
        Self::new()
    }
}

impl MockLlmAdapter {
    /// A mock named `"mock"` with an empty script.
    pub fn new() -> Self {
        MockLlmAdapter {
            provider: "mock".to_string(),
            state: Arc::new(Mutex::new(State {
                script: VecDeque::new(),
                pending_delay: Duration::ZERO,
                default_response: MOCK_DEFAULT_RESPONSE.to_string(),
                calls: 0,
                requests: Vec::new(),
            })),
            context_window: None,
            model: None,
        }
    }

    /// Declares a context window of `tokens`: a request whose estimated
    /// prompt plus `max_tokens` exceeds it is refused with
    /// [`LlmError::ContextLengthExceeded`] before it reaches the script (it
    /// is not counted as a call), as the HTTP adapters refuse to send it.
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Answers as `model` whatever the request names (what prices its
    /// calls, like an HTTP adapter's `with_model`).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    fn check_window(&self, request: &LlmRequest) -> Result<(), LlmError> {
        let Some(window) = self.context_window else {
            return Ok(());
        };
        let needed = super::estimate::window_tokens(request);
        if needed > window {
            return Err(LlmError::ContextLengthExceeded(format!(
                "{}: not sent: ~{needed} tokens do not fit the context window of {window}",
                self.provider
            )));
        }
        Ok(())
    }

    /// Names the provider (what hops and `served_by` report).
    pub fn with_provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider = name.into();
        self
    }

    /// Scripts a text response.
    pub fn with_response(self, content: &str) -> Self {
        self.push(Outcome::Response(LlmResponse::text(content)))
    }

    /// Scripts a full response (tool calls, usage, metadata, ...).
    pub fn with_llm_response(self, response: LlmResponse) -> Self {
        self.push(Outcome::Response(response))
    }

    /// Scripts a response asking for `calls`.
    pub fn with_tool_calls(self, calls: Vec<ToolCall>) -> Self {
        self.push(Outcome::Response(LlmResponse::with_tool_calls(calls)))
    }

    /// Scripts a failure.
    pub fn with_error(self, error: LlmError) -> Self {
        self.push(Outcome::Error(error))
    }

    /// Scripts a chunk stream delivered at once. A first item that is an
    /// error, or an error after some chunks, script the two streaming
    /// failure modes; the stream ends after its first error.
    pub fn with_stream(self, items: Vec<Result<LlmChunk, LlmError>>) -> Self {
        self.push(Outcome::Stream(
            items.into_iter().map(MockStreamStep::Item).collect(),
        ))
    }

    /// Scripts a chunk stream that waits `interval` before each item.
    pub fn with_stream_every(
        self,
        interval: Duration,
        items: Vec<Result<LlmChunk, LlmError>>,
    ) -> Self {
        self.push(Outcome::Stream(
            items
                .into_iter()
                .flat_map(|i| [MockStreamStep::Pause(interval), MockStreamStep::Item(i)])
                .collect(),
        ))
    }

    /// Scripts a chunk stream step by step (items, pauses, a stall).
    pub fn with_stream_steps(self, steps: Vec<MockStreamStep>) -> Self {
        self.push(Outcome::Stream(steps))
    }

    /// Delays the *next* scripted outcome: the call that consumes it waits
    /// `delay` (on tokio's clock) before answering. Delays added in a row
    /// add up.
    pub fn with_delay(self, delay: Duration) -> Self {
        {
            let mut s = self.lock();
            s.pending_delay += delay;
        }
        self
    }

    /// What the mock answers once its script is empty.
    pub fn with_default_response(self, content: &str) -> Self {
        self.lock().default_response = content.to_string();
        self
    }

    /// How many calls (`generate` and `generate_stream`) were made.
    pub fn call_count(&self) -> usize {
        self.lock().calls
    }

    /// How many scripted outcomes are left.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.lock().requests.clone()
    }

    fn push(self, outcome: Outcome) -> Self {
        {
            let mut s = self.lock();
            let delay = std::mem::take(&mut s.pending_delay);
            s.script.push_back(Scripted { delay, outcome });
        }
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a test's own
        // assertion; the script is still consistent, so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the next outcome (synchronously, so concurrent calls consume the
    /// script in call order), then waits its delay.
    async fn next(&self, request: &LlmRequest) -> Outcome {
        let next = {
            let mut s = self.lock();
            s.calls += 1;
            s.requests.push(request.clone());
            s.script.pop_front().unwrap_or_else(|| Scripted {
                delay: Duration::ZERO,
                outcome: Outcome::Response(LlmResponse::text(s.default_response.clone())),
            })
        };
        if !next.delay.is_zero() {
            tokio::time::sleep(next.delay).await;
        }
        next.outcome
    }
}

fn with_model(mut response: LlmResponse, request: &LlmRequest) -> LlmResponse {
    if response.model.is_empty() {
        response.model.clone_from(&request.model);
    }
    response
}

fn scripted_stream(steps: Vec<MockStreamStep>) -> LlmStream {
    let stream = futures::stream::unfold(Some(steps.into_iter()), |it| async move {
        let mut it = it?;
        loop {
            match it.next()? {
                MockStreamStep::Item(item) => {
                    let rest = item.is_ok().then_some(it);
                    return Some((item, rest));
                }
                MockStreamStep::Pause(d) => tokio::time::sleep(d).await,
                MockStreamStep::Stall => std::future::pending::<()>().await,
            }
        }
    });
    Box::pin(stream)
}

#[async_trait]
impl LlmPort for MockLlmAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.check_window(request)?;
        let request = &self.as_model(request);
        match self.next(request).await {
            Outcome::Response(r) => Ok(with_model(r, request)),
            Outcome::Error(e) => Err(e),
            Outcome::Stream(steps) => {
                let mut stream = scripted_stream(steps);
                let mut builder = ResponseBuilder::default();
                while let Some(item) = stream.next().await {
                    builder.push(item?);
                }
                Ok(with_model(builder.finish(), request))
            }
        }
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        self.check_window(request)?;
        let request = &self.as_model(request);
        match self.next(request).await {
            Outcome::Response(r) => {
                let chunk = LlmChunk::from(with_model(r, request));
                Ok(Box::pin(futures::stream::iter([Ok(chunk)])))
            }
            Outcome::Error(e) => Err(e),
            Outcome::Stream(steps) => Ok(scripted_stream(steps)),
        }
    }

    fn get_provider_name(&self) -> &str {
        &self.provider
    }

    fn context_window(&self) -> Option<u64> {
        self.context_window
    }

    fn model_name(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

impl MockLlmAdapter {
    /// `request` as this mock sends it: with its own model, if it has one.
    fn as_model<'a>(&self, request: &'a LlmRequest) -> std::borrow::Cow<'a, LlmRequest> {
        match &self.model {
            None => std::borrow::Cow::Borrowed(request),
            Some(model) => {
                let mut request = request.clone();
                request.model.clone_from(model);
                std::borrow::Cow::Owned(request)
            }
        }
    }
}
