//! Per-node fault tolerance for LLM-agent workflow graphs (the README below).
#![doc = include_str!("../README.md")]

pub use aegis_macros::{aegis, graph};
pub use aegis_runtime::async_trait;
// Every item lives at one path, in the module of its concept; the prelude
// is the one shortcut.
/// The operator's web console over a worker fleet (feature `console`).
#[cfg(feature = "console")]
pub use aegis_runtime::console;
#[cfg(feature = "metrics")]
pub use aegis_runtime::metrics;
pub use aegis_runtime::{
    cache, engine, error, graph, id, llm, paladin, policy, render, state, trace, waypoint, worker,
};

/// What the first fifty lines of a typical program need, in one import:
/// `use aegis::prelude::*;`.
///
/// The macros, the state and graph types, the four policy types, the
/// engine, the in-memory store and cache, and the errors a node or a run
/// returns. Everything else is imported from the module of its concept:
/// [`llm`] (provider adapters, the fallback chain), [`paladin`],
/// [`engine`] (extension traits, streaming), [`waypoint`] (durable stores),
/// [`cache`], [`trace`], [`worker`], [`render`].
pub mod prelude {
    pub use aegis_macros::{aegis, graph};
    pub use aegis_runtime::async_trait;

    pub use aegis_runtime::cache::InMemoryNodeCache;
    pub use aegis_runtime::engine::{RunOutcome, StreamEvent, WarEngine};
    pub use aegis_runtime::error::{EngineError, NodeError, StateNodeError};
    pub use aegis_runtime::graph::{
        Directive, EngineLimits, NextStep, NodeContext, NodeSpec, WarGraph,
    };
    pub use aegis_runtime::id::{END, NodeId, START};
    pub use aegis_runtime::policy::{Aegis, CachePolicy, RetryPolicy, TimeoutPolicy};
    pub use aegis_runtime::state::{
        Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta,
    };
    pub use aegis_runtime::waypoint::{InMemoryWaypointStore, WaypointStore};
}

// The longer guides are doctested as the README is: every Rust block in
// them compiles and runs with `cargo test --doc`.
macro_rules! doctested {
    ($($guide:ident = $path:literal,)*) => {$(
        #[cfg(doctest)]
        #[doc = include_str!($path)]
        struct $guide;
    )*};
}
doctested! {
    DeployingGuide = "../docs/DEPLOYING.md",
    PoliciesGuide = "../docs/POLICIES.md",
    RunningAtScaleGuide = "../docs/RUNNING_AT_SCALE.md",
    ThreadsGuide = "../docs/THREADS.md",
    PerformanceGuide = "../docs/PERFORMANCE.md",
    ArchitectureGuide = "../docs/ARCHITECTURE.md",
    ReliabilityGuide = "../RELIABILITY.md",
    StreamingGuide = "../docs/STREAMING.md",
    LocalModelsGuide = "../docs/LOCAL_MODELS.md",
    PicturesGuide = "../docs/PICTURES.md",
    ConsoleGuide = "../docs/CONSOLE.md",
    BudgetsGuide = "../docs/BUDGETS.md",
    ObservabilityGuide = "../docs/OBSERVABILITY.md",
}

/// What the code `#[aegis]` and `graph!` generate names, and nothing else
/// should: it changes with the macros. `crate = "path"` in either macro
/// points them at another path to this module's parent.
#[doc(hidden)]
pub mod __private {
    pub use aegis_macros::__graph_node;
    pub use aegis_runtime::__macro_support::*;
    pub use aegis_runtime::error::StateNodeError;
    pub use aegis_runtime::graph::{
        AegisDepsFn, AegisDepsNode, AegisNodeFn, Directive, EngineLimits, InputMapping,
        NodeContext, NodeSpec, WarGraph,
    };
    pub use aegis_runtime::id::{END, NodeId, START};
    pub use aegis_runtime::policy::{Aegis, RetryPredicate};
    pub use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule};
}
