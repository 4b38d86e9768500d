//! Who produced a cached result, as every hit reports it.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::activation::Activation;
use crate::id::NodeId;
use crate::policy::CacheScope;

/// Who produced a cached result: recorded with each cache entry when it is
/// stored, and reported by every hit (on its `NodeFinished` event and its
/// node record), so a served answer can be traced to the attempt — and, for
/// a Paladin node, the provider and model — that produced it.
///
/// `served_by`, `chain_position` and `fallback` are what a fallback chain
/// stamped (observability, not attestation); they are unset for a Function
/// node and for a port that stamps nothing. Every field but `node_id` and
/// `attempt` is optional in the stored form, so older entries and records
/// still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CacheOrigin {
    /// The node whose attempt produced the result.
    pub node_id: NodeId,
    /// The task key, when it ran as a mustered task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_key: Option<String>,
    /// The thread the producing run belonged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The attempt that produced it, 1-based.
    pub attempt: u32,
    /// The provider that served it, as a fallback chain stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// The model that produced it (as the provider reported it, else the
    /// one requested).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The serving provider's position in its fallback chain (0 = primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_position: Option<u32>,
    /// Whether a fallback provider (not a chain's first) served it. Such a
    /// result is stored only under `CachePolicy::cache_fallback_results`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
    /// The scope of the key the entry was stored (and so served) under: a
    /// hit on a node-scoped key ([`CacheScope::Node`]) may serve an entry
    /// another graph stored. Stored only when `Node`; older entries and
    /// records read as [`CacheScope::Graph`], the only scope there was.
    #[serde(default, skip_serializing_if = "CacheScope::is_graph")]
    pub scope: CacheScope,
}

impl CacheOrigin {
    /// Sets [`task_key`](Self::task_key): the task key, when it ran as a mustered
    /// task.
    #[must_use]
    pub fn with_task_key(mut self, task_key: Option<impl Into<String>>) -> Self {
        self.task_key = task_key.map(Into::into);
        self
    }

    /// Sets [`thread_id`](Self::thread_id): the thread the producing run belonged
    /// to.
    #[must_use]
    pub fn with_thread_id(mut self, thread_id: Option<impl Into<String>>) -> Self {
        self.thread_id = thread_id.map(Into::into);
        self
    }

    /// Sets [`served_by`](Self::served_by): the provider that served it, as a
    /// fallback chain stamped it.
    #[must_use]
    pub fn with_served_by(mut self, served_by: Option<impl Into<String>>) -> Self {
        self.served_by = served_by.map(Into::into);
        self
    }

    /// Sets [`model`](Self::model): the model that produced it (as the provider
    /// reported it, else the one requested).
    #[must_use]
    pub fn with_model(mut self, model: Option<impl Into<String>>) -> Self {
        self.model = model.map(Into::into);
        self
    }

    /// Sets [`chain_position`](Self::chain_position): the serving provider's
    /// position in its fallback chain (0 = primary).
    #[must_use]
    pub fn with_chain_position(mut self, chain_position: impl Into<Option<u32>>) -> Self {
        self.chain_position = chain_position.into();
        self
    }

    /// Sets [`fallback`](Self::fallback): whether a fallback provider (not a
    /// chain's first) served it.
    #[must_use]
    pub fn with_fallback(mut self, fallback: bool) -> Self {
        self.fallback = fallback;
        self
    }

    /// Sets [`scope`](Self::scope): the scope of the key the entry was stored (and
    /// so served) under: a hit on a node-scoped key ([`CacheScope::Node`]) may
    /// serve an entry another graph stored.
    #[must_use]
    pub fn with_scope(mut self, scope: CacheScope) -> Self {
        self.scope = scope;
        self
    }
}

impl CacheOrigin {
    /// Produced by attempt `attempt` of `node_id`; every other detail unset
    /// (set them with the `with_*` builders), graph-scoped.
    pub fn new(node_id: NodeId, attempt: u32) -> Self {
        CacheOrigin {
            node_id,
            task_key: None,
            thread_id: None,
            attempt,
            served_by: None,
            model: None,
            chain_position: None,
            fallback: false,
            scope: CacheScope::Graph,
        }
    }
}

impl fmt::Display for CacheOrigin {
    /// `attempt 2 of answer`, then `, served by ollama (position 1), model
    /// llama3.2` when known, and `, node-scoped` for a node-scoped entry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attempt {} of {}",
            self.attempt,
            Activation(&self.node_id, &self.task_key)
        )?;
        if let Some(provider) = &self.served_by {
            write!(f, ", served by {provider}")?;
            if let Some(p) = self.chain_position {
                write!(f, " (position {p})")?;
            }
        }
        if let Some(model) = &self.model {
            write!(f, ", model {model}")?;
        }
        if !self.scope.is_graph() {
            write!(f, ", {}-scoped", self.scope)?;
        }
        Ok(())
    }
}
