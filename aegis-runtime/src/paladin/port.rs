//! `PaladinPort`, what the engine runs Paladin nodes through, and the port for
//! engines without one.

use async_trait::async_trait;

use crate::error::PaladinError;
use crate::graph::Paladin;
use crate::graph::{HeartbeatHandle, NodeContext};

/// What one Paladin execution produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PaladinResult {
    /// The final answer.
    pub output: String,
    /// The provider that served it, when a fallback chain stamped it
    /// (observability, not attestation).
    pub served_by: Option<String>,
    /// The serving provider's position in its fallback chain (0 = the
    /// primary), when a chain stamped it.
    pub chain_position: Option<u32>,
    /// Whether a fallback chain served the answer from a provider other
    /// than its first (a node's cache then skips it by default, see
    /// [`CachePolicy`](crate::CachePolicy)).
    pub fallback: bool,
    /// The model that produced the answer, when the port knows it.
    pub model: Option<String>,
    /// How many completion rounds it took.
    pub loops: u32,
    /// Token counts over every completion, when the provider reported them.
    pub usage: Option<crate::llm::LlmUsage>,
}

/// Runs Paladins. The engine calls [`PaladinPort::execute_in`] (by default
/// [`PaladinPort::execute_observed`]) for every attempt of a Paladin node.
#[async_trait]
pub trait PaladinPort: Send + Sync + 'static {
    /// Runs `paladin` on `input`.
    async fn execute(&self, paladin: &Paladin, input: &str) -> Result<PaladinResult, PaladinError>;

    /// Runs `paladin` on `input`, beating `heartbeat` on progress.
    ///
    /// The default delegates to [`PaladinPort::execute`] and claims no
    /// progress, so an idle timeout on a port that does not override this
    /// degrades to a wall clock from the start of the attempt.
    async fn execute_observed(
        &self,
        paladin: &Paladin,
        input: &str,
        heartbeat: &HeartbeatHandle,
    ) -> Result<PaladinResult, PaladinError> {
        let _ = heartbeat;
        self.execute(paladin, input).await
    }

    /// Runs `paladin` on `input` as one attempt of a node: beats the
    /// attempt's heartbeat on progress and may stream the answer's text
    /// with [`NodeContext::emit_token`] as it arrives.
    ///
    /// The engine calls this for every attempt of a Paladin node. The
    /// default delegates to [`PaladinPort::execute_observed`] with the
    /// attempt's heartbeat and streams nothing.
    async fn execute_in(
        &self,
        paladin: &Paladin,
        input: &str,
        ctx: &NodeContext,
    ) -> Result<PaladinResult, PaladinError> {
        self.execute_observed(paladin, input, ctx.heartbeat_handle())
            .await
    }
}

/// A port for engines whose graphs have no Paladin nodes: every execution
/// fails with a `ConfigurationError`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnconfiguredPaladinPort;

#[async_trait]
impl PaladinPort for UnconfiguredPaladinPort {
    async fn execute(
        &self,
        paladin: &Paladin,
        _input: &str,
    ) -> Result<PaladinResult, PaladinError> {
        Err(PaladinError::ConfigurationError(format!(
            "no PaladinPort is configured on this engine to run `{}`",
            paladin.name
        )))
    }
}
