//! The provider boundary.

use async_trait::async_trait;

use super::{LlmChunk, LlmRequest, LlmResponse, LlmStream};
use crate::error::{KnownSecrets, LlmError};

/// An LLM provider: an HTTP adapter, a mock, or a composition of ports
/// (a [`FallbackLlmAdapter`](crate::FallbackLlmAdapter), a
/// [`CircuitBreaker`](crate::CircuitBreaker)). Object safe: ports travel as
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

    /// The provider's name, as hops, errors and `served_by` report it.
    fn get_provider_name(&self) -> &str;

    /// The secret values this port removes from its errors (its API key and
    /// any registered with `with_secret`). A composition of ports (a
    /// fallback chain, a circuit breaker) takes its elements' secrets too,
    /// so its own summaries and logs lose them. The default is none.
    fn known_secrets(&self) -> KnownSecrets {
        KnownSecrets::default()
    }
}
