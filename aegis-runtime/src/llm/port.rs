//! The provider boundary.

use async_trait::async_trait;
use std::time::Duration;

use super::{LlmChunk, LlmRequest, LlmResponse, LlmStream};
use crate::error::{KnownSecrets, LlmError};

/// An LLM provider: an HTTP adapter, a mock, or a composition of ports
/// (a [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter), a
/// [`CircuitBreaker`](crate::llm::CircuitBreaker)). Object safe: ports travel as
/// `Arc<dyn LlmPort>`.
#[async_trait]
pub trait LlmPort: Send + Sync + 'static {
    /// One complete response.
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError>;

    /// The response as a stream of chunks.
    ///
    /// The default calls [`LlmPort::generate`] and delivers the whole
    /// response as one chunk, so a port that cannot stream still can be
    /// consumed as a stream.
    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let chunk = LlmChunk::from(self.generate(request).await?);
        Ok(Box::pin(futures::stream::iter([Ok(chunk)])))
    }

    /// The response as a stream whose first item arrives within
    /// `first_chunk` (a node's
    /// [`TimeoutPolicy::first_chunk`](crate::policy::TimeoutPolicy::first_chunk)).
    ///
    /// The default opens [`LlmPort::generate_stream`] and waits for its
    /// first item under the deadline; a missed deadline is a transient
    /// [`LlmError::Timeout`]. The first item, an error included, is still
    /// delivered at the head of the stream. A
    /// [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter) overrides this to
    /// bound each of its providers in turn (hopping past a silent one), so
    /// the deadline is per provider, never for the whole chain.
    async fn generate_stream_within(
        &self,
        request: &LlmRequest,
        first_chunk: Option<Duration>,
    ) -> Result<LlmStream, LlmError> {
        super::deadlines::first_within(
            self.get_provider_name(),
            first_chunk,
            self.generate_stream(request),
        )
        .await
    }

    /// The provider's name, as hops, errors and `served_by` report it.
    fn get_provider_name(&self) -> &str;

    /// The model's context window in tokens, when the port declares one
    /// (`with_context_window` on the adapters). A fallback chain skips a
    /// provider a request cannot fit. The default declares none.
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// The model this port calls whatever the request names (an adapter's
    /// `with_model`), if any: what prices its calls. The default is none
    /// (the request's model).
    fn model_name(&self) -> Option<&str> {
        None
    }

    /// The secret values this port removes from its errors (its API key and
    /// any registered with `with_secret`). A composition of ports (a
    /// fallback chain, a circuit breaker) takes its elements' secrets too,
    /// so its own summaries and logs lose them. The default is none.
    fn known_secrets(&self) -> KnownSecrets {
        KnownSecrets::default()
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(LlmPort);
