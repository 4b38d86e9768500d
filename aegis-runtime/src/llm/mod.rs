//! The LLM provider boundary: the [`LlmPort`] trait and its types, the
//! scriptable [`MockLlmAdapter`], the HTTP adapters (OpenAI-compatible and
//! Anthropic), the [`FallbackLlmAdapter`] chain and the [`CircuitBreaker`].

pub(crate) mod anthropic;
mod circuit;
mod deadlines;
mod decode;
pub(crate) mod estimate;
mod fallback;
mod http;
mod mock;
pub(crate) mod openai;
mod port;
mod secret;
pub(crate) mod sse;
mod types;

pub use anthropic::{
    ANTHROPIC_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS, ANTHROPIC_VERSION, AnthropicLlmAdapter,
};
pub use circuit::{CircuitBreaker, CircuitBreakerConfig, CircuitState};
pub use deadlines::StreamDeadlines;
pub use fallback::{FALLBACK_PROVIDER_NAME, FallbackChainError, FallbackLlmAdapter};
pub use http::{
    AdapterConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_ERROR_BODY_DEADLINE, DEFAULT_READ_TIMEOUT,
};
pub use mock::{MOCK_DEFAULT_RESPONSE, MockLlmAdapter, MockStreamStep};
pub use openai::{OPENAI_BASE_URL, OpenAiCompatibleLlmAdapter};
pub use port::LlmPort;
pub use secret::ApiKey;
pub use sse::DEFAULT_MAX_EVENT_BYTES;
pub(crate) use types::ResponseBuilder;
pub use types::{
    CHAIN_POSITION_KEY, FALLBACK_KEY, FinishReason, LlmChunk, LlmMessage, LlmRequest, LlmResponse,
    LlmRole, LlmStream, LlmUsage, SERVED_BY_KEY, SERVED_MODEL_KEY, ToolCall, ToolDefinition,
};
