//! The OpenAI-compatible chat-completions adapter (OpenAI, and the servers
//! that speak its API: Ollama, vLLM, llama.cpp, ...).
//!
//! # Wire contract
//!
//! What a server must speak for this adapter, and all it reads of what the
//! server answers (anything else in a body is ignored):
//!
//! - **Request.** `POST {base_url}/chat/completions` with a JSON body:
//!   `model` (the adapter's own model if set, else the request's),
//!   `messages` (each `role` = `system` | `user` | `assistant` | `tool`,
//!   `content`, and `tool_calls` / `tool_call_id` where they apply),
//!   `temperature`, `max_tokens` and `stop` (only when set), `tools` (only
//!   when any: `{"type": "function", "function": {name, description,
//!   parameters}}`, with `tool_choice: "auto"`), `stream` (`true` or
//!   `false`) and, when streaming,
//!   `stream_options: {"include_usage": true}` (a final chunk with `usage`
//!   and no choices; servers that do not know the field ignore it). A
//!   pooled connection the server closed before answering is resent once
//!   on a new connection. Headers: `Authorization:
//!   Bearer <key>` when a key is set; `Accept: text/event-stream` when
//!   streaming.
//! - **Streaming is the default.** [`PaladinExecutionService`](crate::paladin::PaladinExecutionService)
//!   calls [`LlmPort::generate_stream`] unless built `with_streaming(false)`,
//!   so a Paladin node sends `"stream": true` and expects Server-Sent Events:
//!   `data: {json}` events, ending with `data: [DONE]`. Of each event it
//!   reads `choices[0].delta.content` (text), `choices[0].delta.tool_calls[]`
//!   (`index`, `id`, `function.name`, `function.arguments` fragments, joined
//!   by `index`, else by `id`), `choices[0].finish_reason` and `usage`
//!   (`prompt_tokens`, `completion_tokens`). A stream that ends before
//!   `[DONE]` and before any finish reason is an error (one that ends with
//!   no event at all is asked again once without streaming, to learn the
//!   server's own error), and one event may be
//!   at most `with_max_event_bytes` (16 MiB by default).
//! - **Whole responses** (`generate`, `"stream": false`) read `model`,
//!   `choices[0].message.content`, `choices[0].message.tool_calls[]`
//!   (`id`, `function.name`, `function.arguments` as a JSON string),
//!   `choices[0].finish_reason` (`stop`, `length`, `tool_calls` /
//!   `function_call`, `content_filter`, anything else kept as `Other`) and
//!   `usage`; the body is bounded like one streamed event. No choice at all
//!   is a parse error.
//! - **Errors.** A non-2xx status is classified by
//!   [`map_http_status`] (408, 425, 429 and 5xx
//!   transient; a 429's `retry-after-ms` / `retry-after` header is kept),
//!   except an `{"error": {"code": ..}}` envelope whose `code` is
//!   `context_length_exceeded` or `content_filter` /
//!   `content_policy_violation`, which maps to its own variant, and one
//!   whose `code` or `type` is `insufficient_quota` (the account is out of
//!   credit), which is [`LlmError::QuotaExceeded`] whatever its status.
//! - **Usage.** `usage.prompt_tokens` and `usage.completion_tokens` of a
//!   whole response, or of the streamed chunk that carries them (asked for
//!   with `include_usage`), are the completion's
//!   [`LlmUsage`](crate::llm::LlmUsage): what a Paladin attempt is charged.
//! - **Context window.** With `with_context_window`, a request whose
//!   estimated prompt plus `max_tokens` exceeds it is not sent
//!   ([`LlmError::ContextLengthExceeded`]). An `error`
//!   envelope inside a 200 body or a stream event is an error too (its
//!   numeric `code`, or a `server_error` type, standing in for the status).
//!   Error bodies are read up to 64 KiB and redacted of the key.

mod stream;
mod wire;

pub use stream::{OpenAiEvents, OpenAiStreamParser};

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use std::fmt;

use super::http::{
    AdapterConfigError, HttpEndpoint, chunk_stream, endpoint_builders, secret_header,
};
use super::{LlmChunk, LlmPort, LlmRequest, LlmResponse, LlmStream};
use crate::error::{KnownSecrets, LlmError};

/// The public OpenAI API, version segment included (the base-URL convention
/// of both HTTP adapters).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// An [`LlmPort`] over an OpenAI-compatible `POST {base_url}/chat/completions`
/// endpoint, with SSE streaming and tool calls.
///
/// **Base URL convention (both HTTP adapters):** `base_url` is the API root
/// *including* its version segment, as `OPENAI_BASE_URL` is; the adapter
/// appends only the resource (`chat/completions`, `messages`). A trailing
/// `/` is ignored.
/// [`OPENAI_BASE_URL`] is `https://api.openai.com/v1`; others:
/// `http://localhost:11434/v1` (Ollama), `http://localhost:8000/v1` (vLLM),
/// `http://localhost:8080/v1` (llama.cpp). The key, when set, is sent as `Authorization: Bearer ...` and never
/// appears in `Debug` output or errors.
///
/// Errors: a connection failure is [`LlmError::NetworkError`] (a transport
/// timeout [`LlmError::Timeout`]); error codes with a dedicated variant
/// (`context_length_exceeded`, `content_filter`) map to it; every other
/// non-2xx goes through `map_http_status`; an error
/// envelope inside a 200 is an error too; malformed JSON or SSE is
/// [`LlmError::ParseError`].
///
/// ```
/// use aegis_runtime::llm::{LlmPort, OpenAiCompatibleLlmAdapter};
/// let ollama = OpenAiCompatibleLlmAdapter::new("http://localhost:11434/v1")
///     .unwrap()
///     .with_provider_name("ollama")
///     .with_model("llama3.2");
/// assert_eq!(ollama.get_provider_name(), "ollama");
/// ```
#[derive(Clone)]
pub struct OpenAiCompatibleLlmAdapter {
    endpoint: HttpEndpoint,
}

impl fmt::Debug for OpenAiCompatibleLlmAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint.debug(f, "OpenAiCompatibleLlmAdapter")
    }
}

impl OpenAiCompatibleLlmAdapter {
    /// An adapter for the server at `base_url` (version segment included:
    /// [`OPENAI_BASE_URL`]), named `"openai"`, with no key and the requests'
    /// own model.
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, AdapterConfigError> {
        Ok(OpenAiCompatibleLlmAdapter {
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
        self.endpoint.check_window(request)?;
        let model = self.endpoint.model(request);
        let body = wire::encode_request(request, model, stream)?;
        self.endpoint
            .post(self.headers(stream)?, body, wire::pre_check)
            .await
    }
}

#[async_trait]
impl LlmPort for OpenAiCompatibleLlmAdapter {
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

impl OpenAiCompatibleLlmAdapter {
    async fn generate_once(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let response = self.send(request, false).await?;
        let status = response.status().as_u16();
        let body = self.endpoint.read_body(response).await?;
        wire::decode_response(
            &self.endpoint.provider,
            &self.endpoint.secrets,
            status,
            &body,
        )
    }

    /// A streamed completion. A 200 whose stream ends without any event
    /// (llama.cpp's Python server failing after it answered, e.g. on a
    /// prompt over its context) delivered nothing, so the request is asked
    /// again once without streaming: its error is then the server's own,
    /// typed (`ContextLengthExceeded`), or its answer arrives as one chunk.
    async fn stream_once(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let response = self.send(request, true).await?;
        let mut stream = chunk_stream(
            &self.endpoint.provider,
            &self.endpoint.secrets,
            response,
            OpenAiStreamParser::new(self.endpoint.provider.clone())
                .with_secrets(self.endpoint.secrets.clone())
                .with_max_event_bytes(self.endpoint.max_event_bytes),
        );
        let first = stream.next().await;
        if let Some(Err(LlmError::ParseError(message))) = &first
            && message.ends_with(stream::NO_EVENT)
        {
            let whole = self.generate_once(request).await?;
            return Ok(Box::pin(futures::stream::iter([Ok(LlmChunk::from(whole))])));
        }
        Ok(Box::pin(futures::stream::iter(first).chain(stream)))
    }
}
