//! One-call engines for the common cases: an in-memory engine, an engine
//! over a store, and the LLM a Paladin node runs on.

use std::sync::Arc;

use super::WarEngine;
use crate::llm::LlmPort;
use crate::paladin::{PaladinExecutionService, PaladinPort, UnconfiguredPaladinPort};
use crate::waypoint::{InMemoryWaypointStore, WaypointStore};

impl WarEngine<InMemoryWaypointStore> {
    /// An engine keeping its waypoints in memory, with no LLM: what a test,
    /// an example or a graph without Paladin nodes needs. Add an LLM with
    /// [`WarEngine::with_llm`]. Waypoints live as long as the engine's
    /// store, so a thread can be resumed by this engine but not by another
    /// process; use [`WarEngine::from_store`] with a durable store for that.
    pub fn in_memory() -> Self {
        WarEngine::from_store(InMemoryWaypointStore::new())
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// An engine writing waypoints to `store`, with no LLM (Paladin nodes
    /// fail with a `ConfigurationError` until [`WarEngine::with_llm`] or
    /// [`WarEngine::with_paladin_port`] gives it one). Use
    /// [`WarEngine::new`] to share an `Arc` of the store with other engines.
    pub fn from_store(store: S) -> Self {
        WarEngine::new(Arc::new(UnconfiguredPaladinPort), Arc::new(store))
    }

    /// Runs Paladin nodes on `llm` (one provider adapter or a fallback
    /// chain) through a streaming [`PaladinExecutionService`], replacing the
    /// engine's Paladin port.
    pub fn with_llm(self, llm: Arc<dyn LlmPort>) -> Self {
        self.with_paladin_port(Arc::new(PaladinExecutionService::new(llm)))
    }

    /// Runs Paladin nodes through `port`, replacing the engine's Paladin
    /// port: for a `PaladinExecutionService` configured by hand, or a port
    /// of your own.
    pub fn with_paladin_port(mut self, port: Arc<dyn PaladinPort>) -> Self {
        self.paladin_port = port;
        self
    }
}
