//! The Anthropic Messages API adapter.

mod stream;
mod wire;

pub use stream::AnthropicStreamParser;
pub use wire::ANTHROPIC_DEFAULT_MAX_TOKENS;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use std::fmt;

use super::http::{
    AdapterConfigError, HttpEndpoint, chunk_stream, endpoint_builders, read_body, secret_header,
};
use super::{LlmPort, LlmRequest, LlmResponse, LlmStream};
use crate::error::LlmError;

/// The Messages API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The public Anthropic API.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// An [`LlmPort`] over Anthropic's `POST {base_url}/v1/messages`, with SSE
/// streaming and tool use.
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
/// [`map_http_status`](crate::map_http_status); an error envelope inside a
/// 200, or an `error` event mid-stream, maps by its type's documented
/// status; malformed JSON or SSE is [`LlmError::ParseError`].
///
/// ```
/// use aegis_runtime::{AnthropicAdapter, LlmPort};
/// let claude = AnthropicAdapter::new(aegis_runtime::ANTHROPIC_BASE_URL)
///     .unwrap()
///     .with_api_key("sk-ant-...")
///     .with_model("claude-sonnet-4-5");
/// assert_eq!(claude.get_provider_name(), "anthropic");
/// assert!(!format!("{claude:?}").contains("sk-ant"));
/// ```
#[derive(Clone)]
pub struct AnthropicAdapter {
    endpoint: HttpEndpoint,
}

impl fmt::Debug for AnthropicAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint.debug(f, "AnthropicAdapter")
    }
}

impl AnthropicAdapter {
    /// An adapter for the API at `base_url` (without `/v1`), named
    /// `"anthropic"`, with no key and the requests' own model.
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, AdapterConfigError> {
        Ok(AnthropicAdapter {
            endpoint: HttpEndpoint::new(base_url.as_ref(), "v1/messages", "anthropic")?,
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
        let model = self.endpoint.model(request);
        let body = wire::encode_request(request, model, stream)?;
        self.endpoint
            .post(self.headers(stream)?, body, wire::pre_check)
            .await
    }
}

#[async_trait]
impl LlmPort for AnthropicAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let response = self.send(request, false).await?;
        let body = read_body(&self.endpoint.provider, response).await?;
        wire::decode_response(&self.endpoint.provider, &body)
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let response = self.send(request, true).await?;
        Ok(chunk_stream(
            &self.endpoint.provider,
            response,
            AnthropicStreamParser::new(self.endpoint.provider.clone()),
        ))
    }

    fn get_provider_name(&self) -> &str {
        &self.endpoint.provider
    }
}
