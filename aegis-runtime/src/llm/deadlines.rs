//! The two stream deadlines of a provider: the time to a completion's first
//! chunk, and the silence allowed between chunks once one was delivered.

use futures::StreamExt;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

use super::{LlmChunk, LlmStream};
use crate::deadline::deadline_after;
use crate::error::LlmError;

/// Per-provider stream deadlines of a
/// [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter).
///
/// * `first_chunk`: the provider must deliver its first chunk (or fail)
///   within this, counted from the call. A provider silent that long fails
///   with a transient [`LlmError::Timeout`], so the chain hops to the next.
/// * `idle`: once a chunk was delivered, the stream fails with a transient
///   [`LlmError::Timeout`] when no further item arrives within this. The
///   chain never hops then (the first-chunk rule): the call fails, and the
///   node's retry policy decides.
///
/// `None` leaves a bound unset. A zero duration is legal and means "now".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamDeadlines {
    /// The longest wait for the first chunk.
    pub first_chunk: Option<Duration>,
    /// The longest silence between chunks after the first.
    pub idle: Option<Duration>,
}

impl StreamDeadlines {
    /// No deadline at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets the first-chunk deadline.
    pub fn with_first_chunk(mut self, first_chunk: Duration) -> Self {
        self.first_chunk = Some(first_chunk);
        self
    }

    /// Sets the inter-chunk (idle) deadline.
    pub fn with_idle(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// These deadlines, each unset one taken from `fallback`.
    pub(crate) fn or(self, fallback: StreamDeadlines) -> StreamDeadlines {
        StreamDeadlines {
            first_chunk: self.first_chunk.or(fallback.first_chunk),
            idle: self.idle.or(fallback.idle),
        }
    }
}

/// Opens a stream with `open` and waits for its first item, all within
/// `limit` (none: no bound; a limit too far away for an `Instant` is none).
/// The first item is delivered again at the head of the returned stream,
/// an error included; only a missed deadline is turned into an error.
pub(crate) async fn first_within<F>(
    provider: &str,
    limit: Option<Duration>,
    open: F,
) -> Result<LlmStream, LlmError>
where
    F: Future<Output = Result<LlmStream, LlmError>> + Send,
{
    let Some(deadline) = limit.and_then(|l| deadline_after(Instant::now(), l)) else {
        return open.await;
    };
    let peeked = async {
        let mut stream = open.await?;
        let first = stream.next().await;
        Ok::<_, LlmError>((first, stream))
    };
    match tokio::time::timeout_at(deadline, peeked).await {
        Ok(Ok((first, rest))) => Ok(Box::pin(futures::stream::iter(first).chain(rest))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(first_chunk_missed(provider, limit.unwrap_or_default())),
    }
}

/// The error of a provider that sent no first chunk within `limit`.
pub(crate) fn first_chunk_missed(provider: &str, limit: Duration) -> LlmError {
    LlmError::Timeout(format!("{provider} sent no first chunk within {limit:?}"))
}

/// `stream` failing with a transient [`LlmError::Timeout`] (and ending)
/// when an item after the first takes longer than `idle`.
pub(crate) fn stall_limited(
    provider: &str,
    stream: LlmStream,
    idle: Option<Duration>,
) -> LlmStream {
    let Some(idle) = idle else {
        return stream;
    };
    let provider = provider.to_string();
    let state = (Some(stream), false);
    Box::pin(futures::stream::unfold(
        state,
        move |(stream, delivered)| {
            let provider = provider.clone();
            async move {
                let mut stream = stream?;
                let next = if delivered {
                    match deadline_after(Instant::now(), idle) {
                        Some(d) => match tokio::time::timeout_at(d, stream.next()).await {
                            Ok(item) => item,
                            Err(_) => {
                                let e = LlmError::Timeout(format!(
                                    "{provider} stalled for {idle:?} after a chunk"
                                ));
                                return Some((Err::<LlmChunk, _>(e), (None, true)));
                            }
                        },
                        None => stream.next().await,
                    }
                } else {
                    stream.next().await
                };
                let item = next?;
                let rest = item.is_ok().then_some(stream);
                Some((item, (rest, true)))
            }
        },
    ))
}
