//! What `start` and `resume` return for a run that executed.

use crate::error::{EngineError, NodeError};
use crate::graph::ParleyRequest;
use crate::id::NodeId;
use crate::state::Battlefield;
use crate::waypoint::HandledFailure;

/// How a `start` or `resume` call ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RunOutcome {
    /// The vanguard emptied: the run is done.
    Completed {
        /// The thread.
        thread_id: String,
        /// The final state.
        state: Battlefield,
        /// Every failure of the thread whose `on_error` handler ran, in
        /// superstep then vanguard order; empty for a clean run (see
        /// [`RunOutcome::handled`]).
        handled: Vec<HandledFailure>,
    },
    /// The run failed; its last waypoint is `Failed`.
    Failed {
        /// The thread.
        thread_id: String,
        /// The state the failed superstep started from.
        state: Battlefield,
        /// Why.
        error: EngineError,
    },
    /// The run waits for a human; `resume` it with a `ParleyResponse`.
    AwaitingInput {
        /// The thread.
        thread_id: String,
        /// The state so far (the other activations of the superstep merged).
        state: Battlefield,
        /// Each node that parleyed, with its question.
        requests: Vec<(NodeId, ParleyRequest)>,
    },
    /// The run was cancelled; `resume` continues it.
    Halted {
        /// The thread.
        thread_id: String,
        /// The last merged state.
        state: Battlefield,
        /// The activations `resume` will run.
        vanguard: Vec<NodeId>,
    },
}

impl RunOutcome {
    /// The state the run ended with.
    pub fn state(&self) -> &Battlefield {
        match self {
            RunOutcome::Completed { state, .. }
            | RunOutcome::Failed { state, .. }
            | RunOutcome::AwaitingInput { state, .. }
            | RunOutcome::Halted { state, .. } => state,
        }
    }

    /// The thread.
    pub fn thread_id(&self) -> &str {
        match self {
            RunOutcome::Completed { thread_id, .. }
            | RunOutcome::Failed { thread_id, .. }
            | RunOutcome::AwaitingInput { thread_id, .. }
            | RunOutcome::Halted { thread_id, .. } => thread_id,
        }
    }

    /// The structured node error, when a node's failure ended the run.
    pub fn node_error(&self) -> Option<&NodeError> {
        match self {
            RunOutcome::Failed {
                error: EngineError::NodeFailed(e),
                ..
            } => Some(e),
            _ => None,
        }
    }

    /// The failures a Completed run's error handlers compensated: empty when
    /// nothing failed, so a compensated completion is told from a clean one
    /// without reading application fields. Always empty for the other
    /// outcomes: their latest waypoint's [`Waypoint::handled`](crate::waypoint::Waypoint::handled) lists them.
    pub fn handled(&self) -> &[HandledFailure] {
        match self {
            RunOutcome::Completed { handled, .. } => handled,
            _ => &[],
        }
    }

    /// Whether the run completed and no error handler ran on the way.
    pub fn is_clean(&self) -> bool {
        matches!(self, RunOutcome::Completed { handled, .. } if handled.is_empty())
    }

    /// The outcome's name.
    pub fn name(&self) -> &'static str {
        match self {
            RunOutcome::Completed { .. } => "Completed",
            RunOutcome::Failed { .. } => "Failed",
            RunOutcome::AwaitingInput { .. } => "AwaitingInput",
            RunOutcome::Halted { .. } => "Halted",
        }
    }

    /// Whether the run completed.
    pub fn is_completed(&self) -> bool {
        matches!(self, RunOutcome::Completed { .. })
    }

    /// The final state of a completed run, the error of a failed one; a
    /// halted run is `Err(EngineError::Halted)`, a waiting one
    /// `Err(EngineError::AwaitingInput)`.
    pub fn into_result(self) -> Result<Battlefield, EngineError> {
        match self {
            RunOutcome::Completed { state, .. } => Ok(state),
            RunOutcome::Failed { error, .. } => Err(error),
            RunOutcome::AwaitingInput {
                thread_id,
                requests,
                ..
            } => Err(EngineError::AwaitingInput {
                thread_id,
                nodes: requests.into_iter().map(|(n, _)| n).collect(),
            }),
            RunOutcome::Halted {
                thread_id,
                vanguard,
                ..
            } => Err(EngineError::Halted {
                thread_id,
                vanguard,
            }),
        }
    }
}
