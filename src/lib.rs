//! Per-node fault tolerance for LLM-agent workflow graphs (the README below).
#![doc = include_str!("../README.md")]

pub use aegis_macros::{aegis, graph};
// Every type at the crate root, and the same types grouped by module with
// each module's overview.
pub use aegis_runtime::*;
pub use aegis_runtime::{
    cache, engine, error, graph, id, llm, render, state, trace, waypoint, worker,
};

/// What a typical program needs, in one import: `use aegis::prelude::*;`.
///
/// The macros, the state and graph types, the Aegis policy types, the engine
/// and its extension traits (edge evaluators, error handlers, interceptors,
/// retry predicates, trace sinks), run streams, the stores and caches, the errors, the
/// Paladin types and the provider-neutral LLM boundary. Provider adapters
/// (`OpenAiCompatibleLlmAdapter`, `AnthropicLlmAdapter`, the mock, the fallback
/// chain, the circuit breaker) and tuning constants stay out: import them
/// by name from `aegis`.
pub mod prelude {
    pub use aegis_macros::{aegis, graph};
    pub use aegis_runtime::{CancellationToken, async_trait};

    // State and graphs.
    pub use aegis_runtime::{
        Battlefield, BattlefieldSchema, CacheMarker, Directive, DispatchRule, END, FieldName,
        FieldSpec, InputMapping, MusterTask, NextStep, NodeId, NodeSpec, ParleyExpiry,
        ParleyRequest, ParleyResponse, START, StateDelta, StateNode, WarGraph,
    };

    // Policies.
    pub use aegis_runtime::{
        Aegis, CacheKeySpec, CachePolicy, CacheScope, ErrorHandlerSpec, RetryPolicy,
        RetryPredicate, TimeoutPolicy,
    };

    // The engine and what plugs into it.
    pub use aegis_runtime::{
        EdgeConditionEvaluator, EngineConfig, EngineLimits, ErrorHandler, HeartbeatHandle,
        InterceptorDecision, NodeContext, NodeInterceptor, RetryPredicateError,
        RetryPredicateEvaluator, RunOutcome, WarEngine,
    };

    // Streaming a run to its caller.
    pub use aegis_runtime::{NodeUpdate, RunStream, StreamEvent, StreamMode, StreamOptions};

    // Traces.
    pub use aegis_runtime::{
        AttemptStatus, BudgetBound, CollectingTraceSink, TraceEvent, TraceSink,
    };

    // Waypoints and the node cache.
    #[cfg(feature = "redis-cache")]
    pub use aegis_runtime::RedisNodeCache;
    pub use aegis_runtime::{
        Chronicle, InMemoryNodeCache, InMemoryWaypointStore, NodeCache, StoreError, Waypoint,
        WaypointStatus, WaypointStore,
    };
    #[cfg(feature = "postgres")]
    pub use aegis_runtime::{PostgresOptions, PostgresWaypointStore};
    #[cfg(feature = "sqlite")]
    pub use aegis_runtime::{SqliteOptions, SqliteWaypointStore};

    // Errors.
    pub use aegis_runtime::{
        EngineError, LlmError, NodeError, NodeErrorSource, PaladinError, StateError,
        StateNodeError, TimeoutKind, Transience,
    };

    // Paladins and the provider-neutral LLM boundary.
    pub use aegis_runtime::{
        Armament, LlmChunk, LlmMessage, LlmPort, LlmRequest, LlmResponse, Paladin,
        PaladinExecutionService, PaladinPort, PaladinResult,
    };
}

// The longer guides in docs/ are doctested as the README is: every Rust
// block in them compiles and runs with `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/DEPLOYING.md")]
struct DeployingGuide;

/// What the code `#[aegis]` and `graph!` generate names, and nothing else
/// should: it changes with the macros. `crate = "path"` in either macro
/// points them at another path to this module's parent.
#[doc(hidden)]
pub mod __private {
    pub use aegis_macros::__graph_node;
    pub use aegis_runtime::__macro_support::*;
    pub use aegis_runtime::{
        Aegis, AegisDepsFn, AegisDepsNode, AegisNodeFn, Battlefield, BattlefieldSchema, Directive,
        DispatchRule, END, EngineLimits, InputMapping, NodeContext, NodeId, NodeSpec,
        RetryPredicate, START, StateNodeError, WarGraph,
    };
}
