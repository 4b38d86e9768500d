//! One-call engines for the common cases: an in-memory engine, and the LLM
//! or Paladin port a Paladin node runs on.

use super::WarEngine;
use crate::llm::LlmPort;
use crate::paladin::{PaladinExecutionService, PaladinPort};
use crate::share::IntoShared;
use crate::waypoint::{InMemoryWaypointStore, WaypointStore};

impl WarEngine<InMemoryWaypointStore> {
    /// An engine keeping its waypoints in memory, with no LLM: what a test,
    /// an example or a graph without Paladin nodes needs. Add an LLM with
    /// [`WarEngine::with_llm`]. Waypoints live as long as the engine's
    /// store, so a thread can be resumed by this engine but not by another
    /// process; use [`WarEngine::new`] with a durable store for that.
    pub fn in_memory() -> Self {
        WarEngine::new(InMemoryWaypointStore::new())
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// Runs Paladin nodes on `llm` (one provider adapter or a fallback
    /// chain; the adapter itself, or an `Arc` of it to keep scripting or
    /// inspecting it) through a streaming [`PaladinExecutionService`],
    /// replacing the engine's Paladin port.
    pub fn with_llm(self, llm: impl IntoShared<dyn LlmPort>) -> Self {
        self.with_paladin_port(PaladinExecutionService::new(llm))
    }

    /// Runs Paladin nodes through `port`, replacing the engine's Paladin
    /// port: for a `PaladinExecutionService` configured by hand, or a port
    /// of your own.
    pub fn with_paladin_port(mut self, port: impl IntoShared<dyn PaladinPort>) -> Self {
        self.kit.paladin_port = port.into_shared();
        self
    }
}
