//! The Anthropic Messages API adapter.

mod stream;
mod wire;

pub use stream::{AnthropicEvents, AnthropicStreamParser};
pub use wire::ANTHROPIC_DEFAULT_MAX_TOKENS;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use std::fmt;

use super::http::{
    AdapterConfigError, HttpEndpoint, chunk_stream, endpoint_builders, secret_header,
};
use super::{LlmPort, LlmRequest, LlmResponse, LlmStream};
use crate::error::{KnownSecrets, LlmError};

/// The Messages API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The public Anthropic API, version segment included (the base-URL
/// convention of both HTTP adapters).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// An [`LlmPort`] over Anthropic's `POST {base_url}/messages`, with SSE
/// streaming and tool use.
///
/// **Base URL convention (both HTTP adapters):** `base_url` is the API root
/// *including* its version segment, as `OPENAI_BASE_URL` is; the adapter
/// appends only the resource (`chat/completions`, `messages`). A trailing
/// `/` is ignored.
/// [`ANTHROPIC_BASE_URL`] is `https://api.anthropic.com/v1`.
///
/// Usage: `usage.input_tokens` (plus the cache-write and cache-read input
/// tokens) is the prompt, `usage.output_tokens` the completion; streamed,
/// they come on `message_start` and on `message_delta`. With
/// `with_context_window`, a request whose estimated prompt plus
/// `max_tokens` exceeds the window is not sent
/// ([`LlmError::ContextLengthExceeded`]).
///
/// System messages become the `system` prompt; a request without
/// `max_tokens` sends [`ANTHROPIC_DEFAULT_MAX_TOKENS`]. The key is sent as
/// `x-api-key` and never appears in `Debug` output or errors.
///
/// Errors: a connection failure is [`LlmError::NetworkError`] (a transport
/// timeout [`LlmError::Timeout`]); ahead of the shared table, a 403 is an
/// [`LlmError::AuthenticationError`] (a `permission_error`: the key may not
/// use the resource) and an `overloaded_error` is a 529 whatever status
/// carried it; every other non-2xx goes through
/// `map_http_status`; an error envelope inside a
/// 200, or an `error` event mid-stream, maps by its type's documented
/// status; malformed JSON or SSE is [`LlmError::ParseError`].
///
/// ```
/// use aegis_runtime::llm::{AnthropicLlmAdapter, LlmPort};
/// let claude = AnthropicLlmAdapter::new(aegis_runtime::llm::ANTHROPIC_BASE_URL)
///     .unwrap()
///     .with_api_key("sk-ant-...")
///     .with_model("claude-sonnet-4-5");
/// assert_eq!(claude.get_provider_name(), "anthropic");
/// assert!(!format!("{claude:?}").contains("sk-ant"));
/// ```
#[derive(Clone)]
pub struct AnthropicLlmAdapter {
    endpoint: HttpEndpoint,
}

impl fmt::Debug for AnthropicLlmAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint.debug(f, "AnthropicLlmAdapter")
    }
}

impl AnthropicLlmAdapter {
    /// An adapter for the API at `base_url` (version segment included:
    /// [`ANTHROPIC_BASE_URL`]), named `"anthropic"`, with no key and the
    /// requests' own model.
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, AdapterConfigError> {
        Ok(AnthropicLlmAdapter {
            endpoint: HttpEndpoint::new(base_url.as_ref(), "messages", "anthropic")?,
        })
    }

    endpoint_builders!("Sets the API key (sent as `x-api-key`).");

    fn headers(&self, stream: bool) -> Result<HeaderMap, LlmError> {
        let mut h = HeaderMap::new();
        h.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if stream {
            h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(key) = &self.endpoint.api_key {
            let v =
                secret_header(key.expose()).map_err(|e| LlmError::InvalidRequest(e.to_string()))?;
            h.insert("x-api-key", v);
        }
        Ok(h)
    }

    async fn send(
        &self,
        request: &LlmRequest,
        stream: bool,
    ) -> Result<reqwest::Response, LlmError> {
        self.endpoint.check_window(request)?;
        let model = self.endpoint.model(request);
        let body = wire::encode_request(request, model, stream)?;
        self.endpoint
            .post(self.headers(stream)?, body, wire::pre_check)
            .await
    }
}

#[async_trait]
impl LlmPort for AnthropicLlmAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.generate_once(request)
            .await
            .map_err(|e| e.scrubbed(&self.endpoint.secrets))
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        self.stream_once(request)
            .await
            .map_err(|e| e.scrubbed(&self.endpoint.secrets))
    }

    fn get_provider_name(&self) -> &str {
        &self.endpoint.provider
    }

    fn context_window(&self) -> Option<u64> {
        self.endpoint.context_window
    }

    fn model_name(&self) -> Option<&str> {
        self.endpoint.model.as_deref()
    }

    fn known_secrets(&self) -> KnownSecrets {
        self.endpoint.secrets.clone()
    }
}

impl AnthropicLlmAdapter {
    async fn generate_once(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let response = self.send(request, false).await?;
        let body = self.endpoint.read_body(response).await?;
        wire::decode_response(&self.endpoint.provider, &self.endpoint.secrets, &body)
    }

    async fn stream_once(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let response = self.send(request, true).await?;
        Ok(chunk_stream(
            &self.endpoint.provider,
            &self.endpoint.secrets,
            response,
            AnthropicStreamParser::new(self.endpoint.provider.clone())
                .with_secrets(self.endpoint.secrets.clone())
                .with_max_event_bytes(self.endpoint.max_event_bytes),
        ))
    }
}
