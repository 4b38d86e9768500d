//! `PaladinPort`, what the engine runs Paladin nodes through, and the port for
//! engines without one.

use async_trait::async_trait;

use crate::error::PaladinError;
use crate::graph::Paladin;
use crate::graph::{HeartbeatHandle, NodeContext};

/// What one Paladin execution produced.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
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
    /// [`CachePolicy`](crate::policy::CachePolicy)).
    pub fallback: bool,
    /// The model that produced the answer, when the port knows it.
    pub model: Option<String>,
    /// How many completion rounds it took.
    pub loops: u32,
    /// Token counts over every completion, when the provider reported them.
    pub usage: Option<crate::llm::LlmUsage>,
}

impl PaladinResult {
    /// Sets [`served_by`](Self::served_by): the provider that served it, when a
    /// fallback chain stamped it (observability, not attestation).
    #[must_use]
    pub fn with_served_by(mut self, served_by: Option<impl Into<String>>) -> Self {
        self.served_by = served_by.map(Into::into);
        self
    }

    /// Sets [`chain_position`](Self::chain_position): the serving provider's
    /// position in its fallback chain (0 = the primary), when a chain stamped
    /// it.
    #[must_use]
    pub fn with_chain_position(mut self, chain_position: impl Into<Option<u32>>) -> Self {
        self.chain_position = chain_position.into();
        self
    }

    /// Sets [`fallback`](Self::fallback): whether a fallback chain served the
    /// answer from a provider other than its first (a node's cache then skips
    /// it by default, see [`CachePolicy`](crate::policy::CachePolicy)).
    #[must_use]
    pub fn with_fallback(mut self, fallback: bool) -> Self {
        self.fallback = fallback;
        self
    }

    /// Sets [`model`](Self::model): the model that produced the answer, when the
    /// port knows it.
    #[must_use]
    pub fn with_model(mut self, model: Option<impl Into<String>>) -> Self {
        self.model = model.map(Into::into);
        self
    }

    /// Sets [`loops`](Self::loops): how many completion rounds it took.
    #[must_use]
    pub fn with_loops(mut self, loops: u32) -> Self {
        self.loops = loops;
        self
    }

    /// Sets [`usage`](Self::usage): token counts over every completion, when the
    /// provider reported them.
    #[must_use]
    pub fn with_usage(mut self, usage: impl Into<Option<crate::llm::LlmUsage>>) -> Self {
        self.usage = usage.into();
        self
    }
}

impl PaladinResult {
    /// A result whose final answer is `output`, after one loop, with no
    /// provenance or usage (set them with the `with_*` builders).
    pub fn new(output: impl Into<String>) -> Self {
        PaladinResult {
            output: output.into(),
            served_by: None,
            chain_position: None,
            fallback: false,
            model: None,
            loops: 1,
            usage: None,
        }
    }
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

/// The port of an engine given no LLM (`WarEngine::new` without
/// `with_llm`/`with_paladin_port`): every execution fails with a
/// `ConfigurationError` naming the fix.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UnconfiguredPaladinPort;

#[async_trait]
impl PaladinPort for UnconfiguredPaladinPort {
    async fn execute(
        &self,
        paladin: &Paladin,
        _input: &str,
    ) -> Result<PaladinResult, PaladinError> {
        Err(PaladinError::ConfigurationError(format!(
            "no PaladinPort is configured on this engine to run `{}`: \
             give the engine an LLM with `WarEngine::with_llm` (or a port with \
             `WarEngine::with_paladin_port`)",
            paladin.name
        )))
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(PaladinPort);
