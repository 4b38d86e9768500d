use serde::Deserialize;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::engine::NodeExecutionRecord;
use crate::error::NodeError;
use crate::graph::{Directive, NodeId};
use crate::state::Battlefield;

/// One activation due in a superstep.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Activation {
    /// The node to run.
    pub node_id: NodeId,
}

impl Activation {
    /// An activation of `node_id`.
    pub fn node(node_id: impl Into<NodeId>) -> Self {
        Activation {
            node_id: node_id.into(),
        }
    }
}

/// An activation that finished inside a superstep the run has not closed yet
/// (it was halted or failed mid-way): resume reuses it instead of re-running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletedActivation {
    /// What ran.
    pub activation: Activation,
    /// What it returned (after any handler).
    pub directive: Directive,
    /// Its record.
    pub record: NodeExecutionRecord,
}

/// Where a thread stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WaypointStatus {
    /// More supersteps are due.
    Running,
    /// The run completed: the vanguard is empty.
    Completed,
    /// The run failed.
    Failed {
        /// The human-readable reason.
        error: String,
        /// The structured node error, when a node's failure ended the run.
        node_error: Option<NodeError>,
    },
    /// The run was cancelled; `resume` continues it.
    Halted {
        /// Why.
        reason: String,
    },
}

impl WaypointStatus {
    /// The status's name.
    pub fn name(&self) -> &'static str {
        match self {
            WaypointStatus::Running => "Running",
            WaypointStatus::Completed => "Completed",
            WaypointStatus::Failed { .. } => "Failed",
            WaypointStatus::Halted { .. } => "Halted",
        }
    }
}

/// A durable record of a thread after one superstep (or at an interruption).
///
/// A waypoint written at a barrier holds the merged state and the next
/// superstep's vanguard. One written mid-superstep (`interrupted`: halted by
/// cancellation, or failed) holds the state the superstep started from, that
/// superstep's vanguard, and the activations of it that already finished, so
/// that `resume` runs only the rest and then merges exactly as an
/// uninterrupted run would.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waypoint {
    /// The thread.
    pub thread_id: String,
    /// The position of this waypoint in its thread: 0, 1, 2, ...
    pub seq: u64,
    /// The superstep this waypoint closes (or interrupts); 0 for the input.
    pub superstep: u32,
    /// Where the thread stands.
    pub status: WaypointStatus,
    /// The state (see the type's docs for which).
    pub state: Battlefield,
    /// The activations due.
    pub vanguard: Vec<Activation>,
    /// Whether this waypoint was written mid-superstep.
    pub interrupted: bool,
    /// The finished part of an interrupted superstep.
    pub completed: Vec<CompletedActivation>,
    /// The node records of this superstep.
    pub records: Vec<NodeExecutionRecord>,
    /// How often each node has been activated in this thread.
    pub visits: BTreeMap<NodeId, u32>,
    /// The fingerprint of the graph that wrote it.
    pub fingerprint: String,
    /// When it was written.
    pub created_at: SystemTime,
}
