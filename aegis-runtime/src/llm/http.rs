//! HTTP plumbing shared by the provider adapters: the client, transport
//! error mapping, non-2xx mapping, and turning a response body into an
//! [`LlmStream`].

use reqwest::header::{HeaderMap, HeaderValue};
use std::collections::VecDeque;
use std::time::Duration;

use super::LlmStream;
use super::sse::StreamParser;
use crate::error::{LlmError, map_http_status, redact_excerpt};

/// How long connecting to a provider may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a provider may stay silent mid-response before the transport
/// gives up. Generous on purpose: the per-node idle timeout of an Aegis is
/// the bound meant to be tuned.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The most bytes of an error body read before mapping it: enough for any
/// provider's error envelope, bounded against a hostile endless body.
const MAX_ERROR_BODY: usize = 64 * 1024;

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
pub(crate) fn transport_error(provider: &str, e: reqwest::Error) -> LlmError {
    let timeout = e.is_timeout();
    let message = redact_excerpt(&format!("{provider}: {}", error_chain(&e.without_url())));
    if timeout {
        LlmError::Timeout(message)
    } else {
        LlmError::NetworkError(message)
    }
}

/// An adapter-specific look at an error body, run before the shared table.
pub(crate) type PreCheck = fn(provider: &str, status: u16, body: &str) -> Option<LlmError>;

/// Sends a JSON POST. A non-2xx answer becomes an error: the adapter's
/// pre-check first, then [`map_http_status`].
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: Vec<u8>,
    provider: &str,
    pre_check: PreCheck,
) -> Result<reqwest::Response, LlmError> {
    let mut response = client
        .post(url)
        .headers(headers)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| transport_error(provider, e))?;
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
    let mut bytes = Vec::new();
    // A body that fails mid-read still says what it said so far.
    while bytes.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(c)) => bytes.extend_from_slice(&c),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(MAX_ERROR_BODY);
    let body = String::from_utf8_lossy(&bytes);
    let status = status.as_u16();
    if let Some(e) = pre_check(provider, status, &body) {
        return Err(e);
    }
    let hints: Vec<(&str, &str)> = hints
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    Err(map_http_status(provider, status, &body, &hints))
}

/// Reads a whole (successful) body.
pub(crate) async fn read_body(
    provider: &str,
    response: reqwest::Response,
) -> Result<Vec<u8>, LlmError> {
    response
        .bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| transport_error(provider, e))
}

struct BodyStream<P> {
    response: Option<reqwest::Response>,
    parser: P,
    provider: String,
    queue: VecDeque<Result<super::LlmChunk, LlmError>>,
}

/// Streams a (successful) response body through `parser`. The stream ends
/// after the first error.
pub(crate) fn chunk_stream<P: StreamParser>(
    provider: &str,
    response: reqwest::Response,
    parser: P,
) -> LlmStream {
    let state = BodyStream {
        response: Some(response),
        parser,
        provider: provider.to_string(),
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
                Err(e) => Err(transport_error(&st.provider, e)),
            };
            st.queue.extend(chunks.into_iter().map(Ok));
            if let Err(e) = result {
                st.response = None;
                st.queue.push_back(Err(e));
            }
        }
    }))
}
