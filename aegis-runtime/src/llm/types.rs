//! What crosses the provider boundary: requests, responses, stream chunks
//! and tool calls, in a provider-neutral shape every adapter maps to its
//! wire format.

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::pin::Pin;

use crate::error::LlmError;

/// The metadata key under which a fallback chain stamps the provider that
/// served a response (observability, not attestation).
pub const SERVED_BY_KEY: &str = "paladin.served_by";

/// The metadata key under which a fallback chain stamps the serving
/// provider's position in the chain (0 = the first, the primary), next to
/// [`SERVED_BY_KEY`]. In nested chains both name the innermost chain's.
pub const CHAIN_POSITION_KEY: &str = "paladin.chain_position";

/// The metadata key under which a fallback chain stamps the model the
/// serving provider calls, when it names its own (`with_model`): what
/// prices the call. In nested chains, the innermost chain's.
pub const SERVED_MODEL_KEY: &str = "paladin.served_model";

/// The metadata key under which a fallback chain stamps `true` when any
/// chain (nested ones included) served the response from a provider other
/// than its first: the answer is a fallback's, not the primary's.
pub const FALLBACK_KEY: &str = "paladin.fallback";

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LlmRole {
    /// Instructions for the model.
    System,
    /// The human (or the calling program).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering an assistant's [`ToolCall`].
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmMessage {
    /// Who wrote it.
    pub role: LlmRole,
    /// Its text (may be empty for an assistant message that only calls tools).
    pub content: String,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`LlmRole::Tool`] message, the [`ToolCall::id`] it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl LlmMessage {
    fn new(role: LlmRole, content: impl Into<String>) -> Self {
        LlmMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(LlmRole::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(LlmRole::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(LlmRole::Assistant, content)
    }

    /// An assistant message calling tools.
    pub fn assistant_with_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        LlmMessage {
            tool_calls: calls,
            ..Self::new(LlmRole::Assistant, content)
        }
    }

    /// The result of the tool call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        LlmMessage {
            tool_call_id: Some(call_id.into()),
            ..Self::new(LlmRole::Tool, content)
        }
    }
}

/// A tool the model may call, described for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
}

impl ToolDefinition {
    /// A tool named `name`, described to the model as `description`, whose
    /// arguments follow the JSON schema `parameters`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// A model's request to run a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The provider's id for this call; the tool's result message names it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed from the model's JSON.
    pub arguments: Value,
}

impl ToolCall {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

/// One completion request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmRequest {
    /// The model to call (an adapter configured with its own model uses that
    /// instead, so each element of a fallback chain can name its own).
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<LlmMessage>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// The most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
}

impl LlmRequest {
    /// A request for `model` over `messages`.
    pub fn new(model: impl Into<String>, messages: Vec<LlmMessage>) -> Self {
        LlmRequest {
            model: model.into(),
            messages,
            ..Default::default()
        }
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets the token limit.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the stop sequences.
    pub fn with_stop(mut self, stop: Vec<String>) -> Self {
        self.stop = stop;
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }
}

/// Token counts of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmUsage {
    /// Tokens read.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

impl LlmUsage {
    /// `prompt_tokens` in, `completion_tokens` out.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        LlmUsage {
            prompt_tokens,
            completion_tokens,
        }
    }
}

impl LlmUsage {
    /// Both counts together.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Adds `other`'s counts to these.
    pub fn accumulate(&mut self, other: &LlmUsage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end, or a stop sequence.
    Stop,
    /// The token limit.
    Length,
    /// The model wants tools run.
    ToolCalls,
    /// The provider filtered the output.
    ContentFilter,
    /// A reason this crate does not name, as the provider spelled it.
    Other(String),
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmResponse {
    /// The generated text.
    pub content: String,
    /// The tools the model asks to run.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts, when the provider reported them.
    pub usage: Option<LlmUsage>,
    /// The model that answered, as the provider named it.
    pub model: String,
    /// Why the model stopped, when the provider said.
    pub finish_reason: Option<FinishReason>,
    /// Free-form facts about the call; a fallback chain stamps
    /// [`SERVED_BY_KEY`] here.
    pub metadata: Map<String, Value>,
}

impl LlmResponse {
    /// Sets [`content`](Self::content): the generated text.
    #[must_use]
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = content.into();
        self
    }

    /// Sets [`usage`](Self::usage): token counts, when the provider reported them.
    #[must_use]
    pub fn with_usage(mut self, usage: impl Into<Option<LlmUsage>>) -> Self {
        self.usage = usage.into();
        self
    }

    /// Sets [`model`](Self::model): the model that answered, as the provider named
    /// it.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets [`finish_reason`](Self::finish_reason): why the model stopped, when the
    /// provider said.
    #[must_use]
    pub fn with_finish_reason(mut self, finish_reason: impl Into<Option<FinishReason>>) -> Self {
        self.finish_reason = finish_reason.into();
        self
    }

    /// Sets [`metadata`](Self::metadata): free-form facts about the call; a
    /// fallback chain stamps [`SERVED_BY_KEY`] here.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }
}

impl LlmResponse {
    /// A plain text response.
    pub fn text(content: impl Into<String>) -> Self {
        LlmResponse {
            content: content.into(),
            finish_reason: Some(FinishReason::Stop),
            ..Default::default()
        }
    }

    /// A response asking for tools.
    pub fn with_tool_calls(calls: Vec<ToolCall>) -> Self {
        LlmResponse {
            tool_calls: calls,
            finish_reason: Some(FinishReason::ToolCalls),
            ..Default::default()
        }
    }

    /// The provider a fallback chain says served this response.
    pub fn served_by(&self) -> Option<&str> {
        self.metadata.get(SERVED_BY_KEY).and_then(Value::as_str)
    }

    /// The serving provider's position in its fallback chain (0 = primary),
    /// when a chain stamped one.
    pub fn chain_position(&self) -> Option<u32> {
        chain_position(&self.metadata)
    }

    /// Whether a fallback chain served this response from a provider other
    /// than its first.
    pub fn served_by_fallback(&self) -> bool {
        served_by_fallback(&self.metadata)
    }
}

fn chain_position(metadata: &Map<String, Value>) -> Option<u32> {
    metadata
        .get(CHAIN_POSITION_KEY)
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
}

fn served_by_fallback(metadata: &Map<String, Value>) -> bool {
    metadata
        .get(FALLBACK_KEY)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// One piece of a streamed completion.
///
/// A chunk may carry no text (a tool-call fragment, a usage report): it still
/// reports progress to whoever is watching the stream.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmChunk {
    /// The text delta.
    pub content: String,
    /// Tool calls completed by this chunk (adapters assemble the fragments).
    pub tool_calls: Vec<ToolCall>,
    /// Token counts, usually on the last chunk.
    pub usage: Option<LlmUsage>,
    /// Set on the chunk that ends the completion.
    pub finish_reason: Option<FinishReason>,
    /// Free-form facts; a fallback chain stamps [`SERVED_BY_KEY`] on every
    /// chunk it delivers.
    pub metadata: Map<String, Value>,
    /// The model that answered, as the provider's stream names it: on the
    /// first chunk delivered, `None` on the others (and when the stream
    /// names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl LlmChunk {
    /// Sets [`model`](Self::model): the model that answered.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<Option<String>>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets [`content`](Self::content): the text delta.
    #[must_use]
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = content.into();
        self
    }

    /// Sets [`tool_calls`](Self::tool_calls): tool calls completed by this chunk (adapters assemble the fragments).
    #[must_use]
    pub fn with_tool_calls(mut self, tool_calls: Vec<ToolCall>) -> Self {
        self.tool_calls = tool_calls;
        self
    }

    /// Sets [`usage`](Self::usage): token counts, usually on the last chunk.
    #[must_use]
    pub fn with_usage(mut self, usage: impl Into<Option<LlmUsage>>) -> Self {
        self.usage = usage.into();
        self
    }

    /// Sets [`finish_reason`](Self::finish_reason): set on the chunk that ends the completion.
    #[must_use]
    pub fn with_finish_reason(mut self, finish_reason: impl Into<Option<FinishReason>>) -> Self {
        self.finish_reason = finish_reason.into();
        self
    }

    /// Sets [`metadata`](Self::metadata): free-form facts; a fallback chain stamps [`SERVED_BY_KEY`] on every chunk it delivers.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }
}

impl LlmChunk {
    /// A text delta.
    pub fn text(content: impl Into<String>) -> Self {
        LlmChunk {
            content: content.into(),
            ..Default::default()
        }
    }

    /// The provider a fallback chain says served this chunk.
    pub fn served_by(&self) -> Option<&str> {
        self.metadata.get(SERVED_BY_KEY).and_then(Value::as_str)
    }

    /// The serving provider's position in its fallback chain (0 = primary),
    /// when a chain stamped one.
    pub fn chain_position(&self) -> Option<u32> {
        chain_position(&self.metadata)
    }
}

impl From<LlmResponse> for LlmChunk {
    /// The whole response as one chunk.
    fn from(r: LlmResponse) -> Self {
        LlmChunk {
            content: r.content,
            tool_calls: r.tool_calls,
            usage: r.usage,
            finish_reason: r.finish_reason,
            metadata: r.metadata,
            model: (!r.model.is_empty()).then_some(r.model),
        }
    }
}

/// A streamed completion: chunks in order, ending at the first error (if
/// any). Streams are `Send + 'static`, so they outlive the call that made
/// them.
pub type LlmStream = Pin<Box<dyn Stream<Item = Result<LlmChunk, LlmError>> + Send + 'static>>;

/// Folds chunks into the response they add up to.
#[derive(Debug, Default)]
pub(crate) struct ResponseBuilder {
    response: LlmResponse,
}

impl ResponseBuilder {
    pub(crate) fn push(&mut self, chunk: LlmChunk) {
        let r = &mut self.response;
        r.content.push_str(&chunk.content);
        r.tool_calls.extend(chunk.tool_calls);
        if let Some(u) = chunk.usage {
            r.usage.get_or_insert_with(LlmUsage::default).accumulate(&u);
        }
        if chunk.finish_reason.is_some() {
            r.finish_reason = chunk.finish_reason;
        }
        r.metadata.extend(chunk.metadata);
        if let Some(model) = chunk.model.filter(|_| r.model.is_empty()) {
            r.model = model;
        }
    }

    pub(crate) fn finish(self) -> LlmResponse {
        self.response
    }
}
