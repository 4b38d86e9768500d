//! What a node streams to the caller while it runs: LLM tokens and custom
//! progress payloads. The engine's run stream implements [`EmitTarget`] for
//! each attempt; a run without a stream consumer has no target, and emitting
//! costs one branch.

use std::fmt;
use std::sync::Arc;

/// Receives one attempt's streamed output. The engine tags each item with the
/// attempt's thread, node, task and attempt number.
pub(crate) trait EmitTarget: Send + Sync + 'static {
    /// A text delta from an LLM completion served by `provider`.
    fn token(&self, provider: &str, text: &str);
    /// A node's own progress payload.
    fn custom(&self, payload: serde_json::Value);
}

/// The attempt's stream emitter: empty unless someone consumes the run's
/// stream. Clones share one target.
#[derive(Clone, Default)]
pub(crate) struct NodeEmitter(Option<Arc<dyn EmitTarget>>);

impl NodeEmitter {
    /// An emitter sending to `target`.
    pub(crate) fn new(target: Arc<dyn EmitTarget>) -> Self {
        NodeEmitter(Some(target))
    }

    /// Whether anything receives what is emitted.
    pub(crate) fn is_active(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn token(&self, provider: &str, text: &str) {
        if let Some(t) = &self.0 {
            t.token(provider, text);
        }
    }

    pub(crate) fn custom(&self, payload: serde_json::Value) {
        if let Some(t) = &self.0 {
            t.custom(payload);
        }
    }
}

impl fmt::Debug for NodeEmitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NodeEmitter")
            .field(&self.is_active())
            .finish()
    }
}
