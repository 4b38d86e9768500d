//! The Anthropic Messages API adapter.

mod stream;
mod wire;

pub use stream::AnthropicStreamParser;
pub use wire::ANTHROPIC_DEFAULT_MAX_TOKENS;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use std::fmt;
use std::time::Duration;

use super::http::{
    AdapterConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, build_client, chunk_stream,
    endpoint, post_json, read_body, secret_header,
};
use super::{ApiKey, LlmPort, LlmRequest, LlmResponse, LlmStream};
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
    client: reqwest::Client,
    url: String,
    api_key: Option<ApiKey>,
    model: Option<String>,
    provider: String,
}

impl fmt::Debug for AnthropicAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicAdapter")
            .field("provider", &self.provider)
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .finish()
    }
}

impl AnthropicAdapter {
    /// An adapter for the API at `base_url` (without `/v1`), named
    /// `"anthropic"`, with no key and the requests' own model.
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, AdapterConfigError> {
        Ok(AnthropicAdapter {
            client: build_client(DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)?,
            url: endpoint(base_url.as_ref(), "v1/messages")?,
            api_key: None,
            model: None,
            provider: "anthropic".to_string(),
        })
    }

    /// Sets the API key (sent as `x-api-key`).
    pub fn with_api_key(mut self, key: impl Into<ApiKey>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Calls `model` whatever the request names, so this element of a
    /// fallback chain can use its own model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Names the provider (errors, hops and `served_by` report it).
    pub fn with_provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider = name.into();
        self
    }

    /// Replaces the transport timeouts: `connect` for the connection, `read`
    /// for any silence mid-response.
    pub fn with_timeouts(
        mut self,
        connect: Duration,
        read: Duration,
    ) -> Result<Self, AdapterConfigError> {
        self.client = build_client(connect, read)?;
        Ok(self)
    }

    fn headers(&self, stream: bool) -> Result<HeaderMap, LlmError> {
        let mut h = HeaderMap::new();
        h.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if stream {
            h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(key) = &self.api_key {
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
        let model = self.model.as_deref().unwrap_or(&request.model);
        let body = wire::encode_request(request, model, stream)?;
        post_json(
            &self.client,
            &self.url,
            self.headers(stream)?,
            body,
            &self.provider,
            wire::pre_check,
        )
        .await
    }
}

#[async_trait]
impl LlmPort for AnthropicAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let response = self.send(request, false).await?;
        let body = read_body(&self.provider, response).await?;
        wire::decode_response(&self.provider, &body)
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let response = self.send(request, true).await?;
        Ok(chunk_stream(
            &self.provider,
            response,
            AnthropicStreamParser::new(self.provider.clone()),
        ))
    }

    fn get_provider_name(&self) -> &str {
        &self.provider
    }
}
