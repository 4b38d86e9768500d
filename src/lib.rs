#![doc = include_str!("../README.md")]

pub use aegis_macros::{aegis, graph};
pub use aegis_runtime::*;

/// Everything a graph author needs, in one import.
pub mod prelude {
    pub use aegis_macros::{aegis, graph};
    pub use aegis_runtime::{
        Aegis, Battlefield, BattlefieldSchema, CacheKeySpec, CacheMarker, CachePolicy, Directive,
        DispatchRule, END, EngineLimits, ErrorHandler, ErrorHandlerSpec, FieldName, FieldSpec,
        InputMapping, MusterTask, NextStep, NodeContext, NodeError, NodeErrorSource, NodeId,
        NodeSpec, ParleyExpiry, ParleyRequest, ParleyResponse, RetryPolicy, RetryPredicate,
        RunOutcome, START, StateDelta, StateNode, StateNodeError, TimeoutKind, TimeoutPolicy,
        Transience, WarEngine, WarGraph, async_trait,
    };

    // The LLM side: agents, the provider boundary and model fallback.
    pub use aegis_runtime::{
        AnthropicAdapter, Armament, CircuitBreaker, FallbackLlmAdapter, LlmChunk, LlmError,
        LlmMessage, LlmPort, LlmRequest, LlmResponse, MockLlmAdapter, OpenAiCompatibleAdapter,
        Paladin, PaladinError, PaladinExecutionService, PaladinPort, PaladinResult,
    };
}

/// What the code `#[aegis]` and `graph!` generate names, and nothing else
/// should: it changes with the macros. `crate = "path"` in either macro
/// points them at another path to this module's parent.
#[doc(hidden)]
pub mod __private {
    pub use aegis_runtime::__macro_support::*;
    pub use aegis_runtime::{
        Aegis, AegisNodeFn, Battlefield, BattlefieldSchema, Directive, DispatchRule, END,
        EngineLimits, InputMapping, NodeContext, NodeId, NodeSpec, RetryPredicate, START,
        StateNodeError, WarGraph,
    };
}
