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

/// Where a thread stands between two waypoint writes.
pub(crate) struct Cursor {
    pub(crate) thread_id: Arc<str>,
    pub(crate) fingerprint: Arc<str>,
    /// The sequence number of the last waypoint written.
    pub(crate) seq: u64,
    pub(crate) superstep: u32,
    pub(crate) state: Battlefield,
    pub(crate) vanguard: Arc<[Activation]>,
    /// Whether `vanguard` is the superstep `superstep` itself, already begun
    /// (its visits counted), rather than the next one.
    pub(crate) begun: bool,
    pub(crate) completed: Vector<Arc<CompletedActivation>>,
    pub(crate) parley: Option<Arc<ParleyDelivery>>,
    pub(crate) visits: VisitTally,
    pub(crate) manifest: Option<Arc<GraphManifest>>,
    pub(crate) previous_graph: Option<Arc<PreviousGraph>>,
    /// The thread's handled failures so far (see [`Waypoint::handled`]).
    pub(crate) handled: Vec<HandledFailure>,
}

impl Cursor {
    pub(crate) fn from_waypoint(w: Waypoint, index: &GraphIndex<'_>) -> Self {
        Cursor {
            thread_id: w.thread_id.into(),
            fingerprint: w.fingerprint.into(),
            seq: w.seq,
            superstep: w.superstep,
            state: w.state,
            vanguard: w.vanguard,
            begun: w.interrupted,
            completed: w.completed.into_vector(),
            parley: w.parley,
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
            thread_id: &self.thread_id,
            seq,
            superstep: self.superstep,
            status,
            state: &self.state,
            vanguard: &self.vanguard,
            interrupted: self.begun,
            completed: self.completed.clone().into(),
            records,
            parley: self.parley.as_ref(),
            visits: self.visits.snapshot(),
            fingerprint: &self.fingerprint,
            manifest: self.manifest.as_ref(),
            previous_graph: self.previous_graph.as_ref(),
            handled: &self.handled,
            created_at: SystemTime::now(),
        }
    }
}

/// The cursor's part every activation of a superstep reads. Borrowed:
/// from the cursor itself when one activation runs (the cursor is left
/// alone until it ends), or from a [`StepCopy`] when the run loop updates
/// the cursor (progress waypoints) while activations run.
#[derive(Clone, Copy)]
pub(super) struct StepParts<'c> {
    pub(super) thread_id: &'c Arc<str>,
    pub(super) vanguard: &'c Arc<[Activation]>,
    pub(super) state: &'c Battlefield,
    pub(super) parley: Option<&'c ParleyDelivery>,
    pub(super) fingerprint: &'c Arc<str>,
}

impl Cursor {
    pub(super) fn step_parts(&self) -> StepParts<'_> {
        StepParts {
            thread_id: &self.thread_id,
            vanguard: &self.vanguard,
            state: &self.state,
            parley: self.parley.as_deref(),
            fingerprint: &self.fingerprint,
        }
    }
}

/// [`StepParts`] copied (reference counts) out of the cursor.
pub(super) struct StepCopy {
    thread_id: Arc<str>,
    vanguard: Arc<[Activation]>,
    state: Battlefield,
    parley: Option<Arc<ParleyDelivery>>,
    fingerprint: Arc<str>,
}

impl StepCopy {
    pub(super) fn of(cur: &Cursor) -> Self {
        StepCopy {
            thread_id: cur.thread_id.clone(),
            vanguard: cur.vanguard.clone(),
            state: cur.state.clone(),
            parley: cur.parley.clone(),
            fingerprint: cur.fingerprint.clone(),
        }
    }

    pub(super) fn step_parts(&self) -> StepParts<'_> {
        StepParts {
            thread_id: &self.thread_id,
            vanguard: &self.vanguard,
            state: &self.state,
            parley: self.parley.as_deref(),
            fingerprint: &self.fingerprint,
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
