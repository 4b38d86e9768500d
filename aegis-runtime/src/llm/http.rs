//! HTTP plumbing shared by the provider adapters: the client, transport
//! error mapping, non-2xx mapping, and turning a response body into an
//! [`LlmStream`].

use reqwest::header::{HeaderMap, HeaderValue};
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::sse::{DEFAULT_MAX_EVENT_BYTES, StreamParser};
use super::{ApiKey, LlmRequest, LlmStream};
use crate::error::{KnownSecrets, LlmError, redact_connection_string};

/// How long connecting to a provider may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a provider may stay silent mid-response before the transport
/// gives up. Generous on purpose: the per-node idle timeout of an Aegis is
/// the bound meant to be tuned.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The most bytes of an error body read before mapping it: enough for any
/// provider's error envelope, bounded against a hostile endless body.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How long reading an error body may take, by default. The size cap alone
/// does not bound a body that trickles a byte at a time (each byte resets
/// the read timeout); at this deadline the error is mapped from the excerpt
/// read so far.
pub const DEFAULT_ERROR_BODY_DEADLINE: Duration = Duration::from_secs(5);

/// Why an HTTP adapter could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterConfigError {
    /// The base URL is not an absolute `http`/`https` URL.
    #[error("invalid base URL: {0}")]
    InvalidBaseUrl(String),
    /// The HTTP client could not be built (TLS initialisation).
    #[error("could not build the HTTP client: {0}")]
    HttpClient(String),
    /// The API key cannot be sent as a header value.
    #[error("the API key contains characters not allowed in an HTTP header")]
    InvalidApiKey,
}

pub(crate) fn build_client(
    connect: Duration,
    read: Duration,
) -> Result<reqwest::Client, AdapterConfigError> {
    reqwest::Client::builder()
        .connect_timeout(connect)
        .read_timeout(read)
        .build()
        .map_err(|e| AdapterConfigError::HttpClient(error_chain(&e)))
}

/// The clients of one endpoint: the pooled one every request uses, and one
/// that keeps no idle connection, for the single resend after a pooled
/// connection turned out closed.
#[derive(Clone)]
pub(crate) struct Clients {
    pooled: reqwest::Client,
    fresh: reqwest::Client,
}

impl Clients {
    pub(crate) fn new(connect: Duration, read: Duration) -> Result<Self, AdapterConfigError> {
        let fresh = reqwest::Client::builder()
            .connect_timeout(connect)
            .read_timeout(read)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| AdapterConfigError::HttpClient(error_chain(&e)))?;
        Ok(Clients {
            pooled: build_client(connect, read)?,
            fresh,
        })
    }
}

/// Whether a failed send is the server closing the connection before any
/// response began: what a pooled keep-alive connection looks like when the
/// server closed it while it sat idle (llama.cpp's server, under uvicorn,
/// closes idle connections after 5 seconds). No response byte arrived, so
/// nothing of this request was answered, and one resend on a new
/// connection is safe. A refused connection, a timeout, or anything after
/// the response head is not this.
fn closed_before_response(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() || e.is_status() || e.is_body() || e.is_decode() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(inner) = source {
        if let Some(h) = inner.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = inner.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = inner.source();
    }
    false
}

/// What both HTTP adapters hold and do alike: a client, the endpoint URL,
/// the key, the model override and the provider name, and the JSON POST.
/// The adapters differ only in their headers and wire format.
#[derive(Clone)]
pub(crate) struct HttpEndpoint {
    pub(crate) clients: Clients,
    pub(crate) url: String,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) model: Option<String>,
    pub(crate) provider: String,
    /// The key and every secret registered with `with_secret`, removed from
    /// whatever text this endpoint returns.
    pub(crate) secrets: KnownSecrets,
    /// The bound on one SSE event of a streamed response.
    pub(crate) max_event_bytes: usize,
    /// How long reading an error body may take.
    pub(crate) error_body_deadline: Duration,
    /// The model's context window in tokens, when declared.
    pub(crate) context_window: Option<u64>,
}

impl HttpEndpoint {
    /// `{base_url}/{path}` under the default timeouts, named `provider`,
    /// with no key and the requests' own model.
    pub(crate) fn new(
        base_url: &str,
        path: &str,
        provider: &str,
    ) -> Result<Self, AdapterConfigError> {
        Ok(HttpEndpoint {
            clients: Clients::new(DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)?,
            url: endpoint(base_url, path)?,
            api_key: None,
            model: None,
            provider: provider.to_string(),
            secrets: KnownSecrets::default(),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            error_body_deadline: DEFAULT_ERROR_BODY_DEADLINE,
            context_window: None,
        })
    }

    /// An adapter's `Debug`, under its type name: the key shows redacted
    /// (its own `Debug`), the URL without credentials or known secrets (a
    /// proxy token in its query, say), the client not at all.
    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>, adapter: &str) -> fmt::Result {
        f.debug_struct(adapter)
            .field("provider", &self.provider)
            .field(
                "url",
                &self.secrets.scrub(&redact_connection_string(&self.url)),
            )
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .field("secrets", &self.secrets)
            .finish()
    }

    /// Refuses, without sending it, a request that cannot fit the declared
    /// context window (estimated prompt plus `max_tokens`).
    pub(crate) fn check_window(&self, request: &LlmRequest) -> Result<(), LlmError> {
        let Some(window) = self.context_window else {
            return Ok(());
        };
        let needed = super::estimate::window_tokens(request);
        if needed > window {
            return Err(LlmError::ContextLengthExceeded(format!(
                "{}: not sent: ~{needed} tokens (prompt estimate plus max_tokens) do not fit the context window of {window}",
                self.provider
            )));
        }
        Ok(())
    }

    /// The model to call: the override, else the request's.
    pub(crate) fn model<'a>(&'a self, request: &'a LlmRequest) -> &'a str {
        self.model.as_deref().unwrap_or(&request.model)
    }

    /// Sends a JSON POST. A non-2xx answer becomes an error: the adapter's
    /// pre-check first, then [`KnownSecrets::map_http_status`], on at most
    /// 64 KiB of the body read within the error-body deadline.
    ///
    /// A pooled connection the server closed before answering (a stale
    /// keep-alive) gets one resend on a new connection; see
    /// `closed_before_response`.
    pub(crate) async fn post(
        &self,
        headers: HeaderMap,
        body: Vec<u8>,
        pre_check: PreCheck,
    ) -> Result<reqwest::Response, LlmError> {
        let (provider, secrets) = (self.provider.as_str(), &self.secrets);
        let send = |client: &reqwest::Client, body: Vec<u8>| {
            client
                .post(&self.url)
                .headers(headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .send()
        };
        let mut response = match send(&self.clients.pooled, body.clone()).await {
            Ok(r) => r,
            Err(e) if closed_before_response(&e) => {
                tracing::debug!(
                    provider,
                    "the connection closed before a response; resending once on a new connection"
                );
                send(&self.clients.fresh, body)
                    .await
                    .map_err(|e| transport_error(provider, secrets, e))?
            }
            Err(e) => return Err(transport_error(provider, secrets, e)),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let hints: Vec<(String, String)> = ["retry-after-ms", "retry-after"]
            .iter()
            .filter_map(|name| {
                let v = response.headers().get(*name)?.to_str().ok()?;
                Some(((*name).to_string(), v.to_string()))
            })
            .collect();
        let bytes = read_error_body(&mut response, self.error_body_deadline).await;
        let body = String::from_utf8_lossy(&bytes);
        let status = status.as_u16();
        if let Some(e) = pre_check(provider, secrets, status, &body) {
            return Err(e);
        }
        let hints: Vec<(&str, &str)> = hints
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        Err(secrets.map_http_status(provider, status, &body, &hints))
    }
}

/// Up to [`MAX_ERROR_BODY`] bytes of an error body, read for at most
/// `deadline` (one too long for an `Instant` is no deadline). A body that
/// fails or runs out of time mid-read still says what it said so far.
async fn read_error_body(response: &mut reqwest::Response, deadline: Duration) -> Vec<u8> {
    let mut bytes = Vec::new();
    let read = async {
        while bytes.len() < MAX_ERROR_BODY {
            match response.chunk().await {
                Ok(Some(c)) => bytes.extend_from_slice(&c),
                Ok(None) | Err(_) => break,
            }
        }
    };
    match tokio::time::Instant::now().checked_add(deadline) {
        Some(at) => {
            // Timing out is an answer too: the excerpt so far.
            let _ = tokio::time::timeout_at(at, read).await;
        }
        None => read.await,
    }
    bytes.truncate(MAX_ERROR_BODY);
    bytes
}

/// The builder methods of an adapter holding an `endpoint: HttpEndpoint`;
/// `$key_doc` says how it sends the key.
macro_rules! endpoint_builders {
    ($key_doc:literal) => {
        #[doc = $key_doc]
        ///
        /// The key is also removed by value from every error this adapter
        /// returns, whatever its shape.
        pub fn with_api_key(mut self, key: impl Into<$crate::llm::ApiKey>) -> Self {
            let key = key.into();
            self.endpoint.secrets = self.endpoint.secrets.clone().with(key.expose());
            self.endpoint.api_key = Some(key);
            self
        }

        /// Registers a further secret (a proxy token, a credential the
        /// server may echo) removed by value, as an exact substring, from
        /// every error this adapter returns.
        pub fn with_secret(mut self, secret: impl AsRef<str>) -> Self {
            self.endpoint.secrets = self.endpoint.secrets.clone().with(secret);
            self
        }

        /// Calls `model` whatever the request names, so this element of a
        /// fallback chain can use its own model.
        pub fn with_model(mut self, model: impl Into<String>) -> Self {
            self.endpoint.model = Some(model.into());
            self
        }

        /// Declares the model's context window in tokens: a request whose
        /// estimated prompt plus `max_tokens` exceeds it is not sent (a
        /// [`LlmError::ContextLengthExceeded`](crate::error::LlmError::ContextLengthExceeded)),
        /// and a fallback chain skips this provider for it.
        pub fn with_context_window(mut self, tokens: u64) -> Self {
            self.endpoint.context_window = Some(tokens);
            self
        }

        /// Names the provider (errors, hops and `served_by` report it).
        pub fn with_provider_name(mut self, name: impl Into<String>) -> Self {
            self.endpoint.provider = name.into();
            self
        }

        /// Bounds one event of a streamed response (all its `data:` lines
        /// together), and a non-streamed response body, to `bytes`; a
        /// larger one is a
        /// [`LlmError::ParseError`](crate::error::LlmError::ParseError). The
        /// default is [`DEFAULT_MAX_EVENT_BYTES`](crate::llm::DEFAULT_MAX_EVENT_BYTES).
        pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
            self.endpoint.max_event_bytes = bytes;
            self
        }

        /// How long reading a non-2xx body may take before the error is
        /// mapped from what arrived so far (default
        /// [`DEFAULT_ERROR_BODY_DEADLINE`](crate::llm::DEFAULT_ERROR_BODY_DEADLINE));
        /// one too long for an `Instant` means no deadline but the 64 KiB
        /// cap and the read timeout.
        pub fn with_error_body_deadline(mut self, deadline: std::time::Duration) -> Self {
            self.endpoint.error_body_deadline = deadline;
            self
        }

        /// Replaces the transport timeouts: `connect` for the connection,
        /// `read` for any silence mid-response.
        pub fn with_timeouts(
            mut self,
            connect: std::time::Duration,
            read: std::time::Duration,
        ) -> Result<Self, $crate::llm::AdapterConfigError> {
            self.endpoint.clients = $crate::llm::http::Clients::new(connect, read)?;
            Ok(self)
        }
    };
}
pub(crate) use endpoint_builders;

/// Joins `base` and `path`, checking that `base` is an http(s) URL.
pub(crate) fn endpoint(base: &str, path: &str) -> Result<String, AdapterConfigError> {
    let url =
        reqwest::Url::parse(base).map_err(|e| AdapterConfigError::InvalidBaseUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(AdapterConfigError::InvalidBaseUrl(format!(
            "unsupported scheme `{}`",
            url.scheme()
        )));
    }
    Ok(format!("{}/{}", base.trim_end_matches('/'), path))
}

/// A header value holding a credential: checked, and marked sensitive so
/// the HTTP stack never logs it.
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue, AdapterConfigError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| AdapterConfigError::InvalidApiKey)?;
    v.set_sensitive(true);
    Ok(v)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// A transport failure: a timeout is [`LlmError::Timeout`], everything else
/// (refused, reset, DNS, TLS, a body cut mid-transfer) is
/// [`LlmError::NetworkError`]. The URL is dropped and the text redacted.
pub(crate) fn transport_error(
    provider: &str,
    secrets: &KnownSecrets,
    e: reqwest::Error,
) -> LlmError {
    let timeout = e.is_timeout();
    let message = secrets.redact_excerpt(&format!("{provider}: {}", error_chain(&e.without_url())));
    if timeout {
        LlmError::Timeout(message)
    } else {
        LlmError::NetworkError(message)
    }
}

/// An adapter-specific look at an error body, run before the shared table.
pub(crate) type PreCheck =
    fn(provider: &str, secrets: &KnownSecrets, status: u16, body: &str) -> Option<LlmError>;

impl HttpEndpoint {
    /// Reads a whole (successful) body, bounded like one streamed event: a
    /// completion larger than that is a [`LlmError::ParseError`], read no
    /// further.
    pub(crate) async fn read_body(
        &self,
        mut response: reqwest::Response,
    ) -> Result<Vec<u8>, LlmError> {
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transport_error(&self.provider, &self.secrets, e))?
        {
            if body.len().saturating_add(chunk.len()) > self.max_event_bytes {
                return Err(LlmError::ParseError(format!(
                    "{}: response body longer than {} bytes",
                    self.provider, self.max_event_bytes
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

struct BodyStream<P> {
    response: Option<reqwest::Response>,
    parser: P,
    provider: String,
    secrets: KnownSecrets,
    queue: VecDeque<Result<super::LlmChunk, LlmError>>,
}

/// Streams a (successful) response body through `parser`. The stream ends
/// after the first error.
pub(crate) fn chunk_stream<P: StreamParser>(
    provider: &str,
    secrets: &KnownSecrets,
    response: reqwest::Response,
    parser: P,
) -> LlmStream {
    let state = BodyStream {
        response: Some(response),
        parser,
        provider: provider.to_string(),
        secrets: secrets.clone(),
        queue: VecDeque::new(),
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            let response = st.response.as_mut()?;
            let mut chunks = Vec::new();
            let result = match response.chunk().await {
                Ok(Some(bytes)) => st.parser.push(&bytes, &mut chunks),
                Ok(None) => {
                    st.response = None;
                    st.parser.finish(&mut chunks)
                }
                Err(e) => Err(transport_error(&st.provider, &st.secrets, e)),
            };
            st.queue.extend(chunks.into_iter().map(Ok));
            if let Err(e) = result {
                st.response = None;
                st.queue.push_back(Err(e.scrubbed(&st.secrets)));
            }
        }
    }))
}
