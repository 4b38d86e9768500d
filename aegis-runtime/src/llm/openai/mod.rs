//! The OpenAI-compatible chat-completions adapter (OpenAI, and the servers
//! that speak its API: Ollama, vLLM, llama.cpp, ...).

mod stream;
mod wire;

pub use stream::OpenAiStreamParser;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use std::fmt;

use super::http::{
    AdapterConfigError, HttpEndpoint, chunk_stream, endpoint_builders, read_body, secret_header,
};
use super::{LlmPort, LlmRequest, LlmResponse, LlmStream};
use crate::error::LlmError;

/// An [`LlmPort`] over an OpenAI-compatible `POST {base_url}/chat/completions`
/// endpoint, with SSE streaming and tool calls.
///
/// `base_url` includes the API version segment, as `OPENAI_BASE_URL` does:
/// `https://api.openai.com/v1`, `http://localhost:11434/v1` (Ollama),
/// `http://localhost:8000/v1` (vLLM), `http://localhost:8080/v1` (llama.cpp).
/// The key, when set, is sent as `Authorization: Bearer ...` and never
/// appears in `Debug` output or errors.
///
/// Errors: a connection failure is [`LlmError::NetworkError`] (a transport
/// timeout [`LlmError::Timeout`]); error codes with a dedicated variant
/// (`context_length_exceeded`, `content_filter`) map to it; every other
/// non-2xx goes through [`map_http_status`](crate::map_http_status); an error
/// envelope inside a 200 is an error too; malformed JSON or SSE is
/// [`LlmError::ParseError`].
///
/// ```
/// use aegis_runtime::{LlmPort, OpenAiCompatibleAdapter};
/// let ollama = OpenAiCompatibleAdapter::new("http://localhost:11434/v1")
///     .unwrap()
///     .with_provider_name("ollama")
///     .with_model("llama3.2");
/// assert_eq!(ollama.get_provider_name(), "ollama");
/// ```
#[derive(Clone)]
pub struct OpenAiCompatibleAdapter {
    endpoint: HttpEndpoint,
}

impl fmt::Debug for OpenAiCompatibleAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint.debug(f, "OpenAiCompatibleAdapter")
    }
}

impl OpenAiCompatibleAdapter {
    /// An adapter for the server at `base_url`, named `"openai"`, with no key
    /// and the requests' own model.
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, AdapterConfigError> {
        Ok(OpenAiCompatibleAdapter {
            endpoint: HttpEndpoint::new(base_url.as_ref(), "chat/completions", "openai")?,
        })
    }

    endpoint_builders!("Sets the API key (sent as a bearer token).");

    fn headers(&self, stream: bool) -> Result<HeaderMap, LlmError> {
        let mut h = HeaderMap::new();
        if stream {
            h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(key) = &self.endpoint.api_key {
            let v = secret_header(&format!("Bearer {}", key.expose()))
                .map_err(|e| LlmError::InvalidRequest(e.to_string()))?;
            h.insert(AUTHORIZATION, v);
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
impl LlmPort for OpenAiCompatibleAdapter {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let response = self.send(request, false).await?;
        let status = response.status().as_u16();
        let body = read_body(&self.endpoint.provider, response).await?;
        wire::decode_response(&self.endpoint.provider, status, &body)
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let response = self.send(request, true).await?;
        Ok(chunk_stream(
            &self.endpoint.provider,
            response,
            OpenAiStreamParser::new(self.endpoint.provider.clone()),
        ))
    }

    fn get_provider_name(&self) -> &str {
        &self.endpoint.provider
    }
}
