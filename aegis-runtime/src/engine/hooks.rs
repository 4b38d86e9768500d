//! The extension points registered on an engine: retry predicates, edge
//! evaluators and interceptors.

use async_trait::async_trait;

use crate::error::{NodeError, StateNodeError};
use crate::graph::Directive;
use crate::id::NodeId;
use crate::state::Battlefield;

/// An error from a custom retry predicate; the engine then does not retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry predicate failed: {0}")]
pub struct RetryPredicateError(pub String);

impl RetryPredicateError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        RetryPredicateError(message.into())
    }
}

/// A custom retry decision, registered with `WarEngine::with_retry_predicate`
/// and named by `RetryPredicate::Custom(name)`.
#[async_trait]
pub trait RetryPredicateEvaluator: Send + Sync + 'static {
    /// Whether to run `attempt` (≥ 2) after `err`. Still bounded by
    /// `max_attempts`. An `Err` means no retry (and is logged).
    async fn allows(&self, err: &NodeError, attempt: u32) -> Result<bool, RetryPredicateError>;
}

/// Picks the targets of conditional edges, registered with
/// `WarEngine::with_edge_evaluator` and named in `add_conditional_edges`.
#[async_trait]
pub trait EdgeConditionEvaluator: Send + Sync + 'static {
    /// The targets to activate next, among the edges' declared targets
    /// (`END`, or none, activates nothing). Sees the merged state.
    async fn evaluate(&self, state: &Battlefield) -> Result<Vec<NodeId>, StateNodeError>;
}

/// An interceptor's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InterceptorDecision {
    /// Go on.
    Continue,
    /// `before`: do not run the node; it contributes nothing and its edges
    /// are followed. `after`: discard the node's result likewise.
    Skip,
    /// Fail the node with this reason (`Permanent`, never retried).
    Fail(String),
}

/// Observes and gates node attempts.
///
/// `before` runs before every attempt (the retry loop wraps outside the
/// interceptor chain); `after` only after the attempt that succeeded. A cache
/// hit runs neither.
#[async_trait]
pub trait NodeInterceptor: Send + Sync + 'static {
    /// Called before each attempt.
    async fn before(&self, node: &NodeId, state: &Battlefield) -> InterceptorDecision {
        let _ = (node, state);
        InterceptorDecision::Continue
    }

    /// Called after the succeeding attempt.
    async fn after(&self, node: &NodeId, directive: &Directive) -> InterceptorDecision {
        let _ = (node, directive);
        InterceptorDecision::Continue
    }
}

/// A custom error handler, registered with `WarEngine::with_error_handler`
/// and named by `ErrorHandlerSpec::Custom(name)`. It runs on a node's final
/// failure and decides what happens next.
#[async_trait]
pub trait ErrorHandler: Send + Sync + 'static {
    /// `err` is the structured failure; `state` the snapshot the failed
    /// superstep started from (the failed attempts wrote nothing). The
    /// returned directive takes the node's place; an `Err` fails the run with
    /// that error.
    async fn handle(&self, err: &NodeError, state: &Battlefield) -> Result<Directive, NodeError>;
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(
    RetryPredicateEvaluator,
    EdgeConditionEvaluator,
    NodeInterceptor,
    ErrorHandler,
);
