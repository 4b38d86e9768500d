//! The run cursor: where a thread stands between two waypoint writes, and
//! the part of it every activation of a superstep reads.

use imbl::Vector;
use std::sync::Arc;
use std::time::SystemTime;

use super::index::GraphIndex;
use super::tally::VisitTally;
use crate::few::Few;
use crate::graph::GraphManifest;
use crate::state::Battlefield;
use crate::waypoint::{
    Activation, CompletedActivation, Draft, HandledFailure, NodeExecutionRecord, ParleyDelivery,
    PreviousGraph, Waypoint, WaypointStatus,
};

/// The part of the cursor every activation of a superstep reads: lent in
/// place when one activation runs (the cursor is left alone until it
/// ends), cloned (reference counts) when the run loop updates the cursor
/// (progress waypoints) while activations run.
#[derive(Clone)]
pub(crate) struct Step {
    pub(crate) thread_id: Arc<str>,
    pub(crate) fingerprint: Arc<str>,
    pub(crate) state: Battlefield,
    pub(crate) vanguard: Arc<[Activation]>,
    pub(crate) parley: Option<Arc<ParleyDelivery>>,
}

/// Where a thread stands between two waypoint writes.
pub(crate) struct Cursor {
    pub(crate) step: Step,
    /// The sequence number of the last waypoint written.
    pub(crate) seq: u64,
    pub(crate) superstep: u32,
    /// Whether `vanguard` is the superstep `superstep` itself, already begun
    /// (its visits counted), rather than the next one.
    pub(crate) begun: bool,
    pub(crate) completed: Vector<Arc<CompletedActivation>>,
    pub(crate) visits: VisitTally,
    pub(crate) manifest: Option<Arc<GraphManifest>>,
    pub(crate) previous_graph: Option<Arc<PreviousGraph>>,
    /// The thread's handled failures so far (see [`Waypoint::handled`]).
    pub(crate) handled: Vec<HandledFailure>,
}

impl Cursor {
    pub(crate) fn from_waypoint(w: Waypoint, index: &GraphIndex<'_>) -> Self {
        Cursor {
            step: Step {
                thread_id: w.thread_id.into(),
                fingerprint: w.fingerprint.into(),
                state: w.state,
                vanguard: w.vanguard,
                parley: w.parley,
            },
            seq: w.seq,
            superstep: w.superstep,
            begun: w.interrupted,
            completed: w.completed.into_vector(),
            visits: VisitTally::from_visits(w.visits, index),
            manifest: w.manifest,
            previous_graph: w.previous_graph,
            handled: w.handled,
        }
    }

    /// The waypoint at `seq`, drafted from the cursor (see [`Draft`]).
    pub(crate) fn draft(
        &self,
        seq: u64,
        status: WaypointStatus,
        records: Few<NodeExecutionRecord>,
    ) -> Draft<'_> {
        Draft {
            thread_id: &self.step.thread_id,
            seq,
            superstep: self.superstep,
            status,
            state: &self.step.state,
            vanguard: &self.step.vanguard,
            interrupted: self.begun,
            completed: self.completed.clone().into(),
            records,
            parley: self.step.parley.as_ref(),
            visits: self.visits.snapshot(),
            fingerprint: &self.step.fingerprint,
            manifest: self.manifest.as_ref(),
            previous_graph: self.previous_graph.as_ref(),
            handled: &self.handled,
            created_at: SystemTime::now(),
        }
    }
}

/// Puts finished activations in vanguard order. Sorted as a plain vector
/// and rebuilt: sorting a persistent vector in place walks its tree for
/// every element it touches.
pub(crate) fn sort_completed(completed: &mut Vector<Arc<CompletedActivation>>) {
    let mut items: Vec<Arc<CompletedActivation>> = completed.iter().cloned().collect();
    items.sort_by(|a, b| a.activation.cmp(&b.activation));
    *completed = items.into_iter().collect();
}
