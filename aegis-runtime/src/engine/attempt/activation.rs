//! What one activation of a node is given and how it ends: the types every
//! attempt rule reads, in a file of their own so the rules need not import
//! each other or the attempt loop.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::battalion_call::RunsBattalion;
use crate::engine::run_budget::RunBudget;
use crate::error::NodeError;
use crate::graph::{Directive, MusterTask, NodeSpec, ParleyResponse, TaskRef};
use crate::policy::Aegis;
use crate::state::BattlefieldSchema;
use crate::waypoint::{HandledFailure, NodeExecutionRecord};

/// Everything one activation of a node needs to know: where it runs, its
/// node and policies, its task and the answer to its parley.
pub(crate) struct ActivationCtx<'a> {
    pub(crate) thread_id: &'a Arc<str>,
    pub(crate) superstep: u32,
    /// When the whole `start`/`resume` call runs out of time.
    pub(crate) run_budget: &'a RunBudget,
    pub(crate) spec: &'a NodeSpec,
    /// The node's policies (an empty [`Aegis`] when it declares none).
    pub(crate) aegis: &'a Aegis,
    pub(crate) fingerprint: &'a str,
    pub(crate) schema: &'a BattlefieldSchema,
    pub(crate) task: Option<&'a MusterTask>,
    /// The node's cache key seed, for the graph `fingerprint` names.
    pub(crate) cache_seed: Option<&'a crate::cache::KeySeed>,
    /// The same task as the attempt's context holds it (shared, not copied).
    pub(crate) task_ref: Option<TaskRef>,
    pub(crate) parley_response: Option<&'a ParleyResponse>,
    /// How often this node has been activated in the thread (1 = first).
    pub(crate) visit: u32,
    pub(crate) shutdown_grace: Duration,
    /// Runs a Battalion's child graph: the engine, over its store, which
    /// the attempt layer does not otherwise see.
    pub(crate) battalions: &'a dyn RunsBattalion,
}

/// The policies of a node that declares none.
pub(crate) static NO_POLICIES: Aegis = Aegis::new();

/// How one activation ended.
pub(crate) enum ActivationResult {
    /// Contributes a directive: the node's own success, or, after a final
    /// failure, what its error handler decided (the record then reads Failed).
    Done {
        directive: Directive,
        record: NodeExecutionRecord,
        /// Set when the directive is the error handler's. Boxed: a rare
        /// case, and every result is moved through several futures.
        handled: Option<Box<HandledFailure>>,
    },
    /// A final failure. Its error is boxed: a rare case, and inline it
    /// would make every result (nearly all successes) a third larger.
    Failed {
        error: Box<NodeError>,
        record: NodeExecutionRecord,
        /// The run deadline passed (an `EngineRun` cut, or during a backoff).
        budget_exhausted: bool,
    },
    /// Cancelled: re-listed in the Halted waypoint's vanguard.
    Shutdown { record: NodeExecutionRecord },
}

impl ActivationResult {
    pub(super) fn record_mut(&mut self) -> &mut NodeExecutionRecord {
        match self {
            ActivationResult::Done { record, .. }
            | ActivationResult::Failed { record, .. }
            | ActivationResult::Shutdown { record } => record,
        }
    }
}

/// How one attempt ended.
pub(super) enum AttemptEnd {
    Done(Directive),
    Error(NodeError),
    Shutdown,
}
