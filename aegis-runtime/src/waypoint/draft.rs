//! `Draft`: the next waypoint as the engine's cursor holds it, lent rather
//! than copied.
//!
//! The public [`Waypoint`] owns every part. Built from the cursor, it
//! clones the thread id, the fingerprint and the manifest (a reference
//! count each, an atomic write) for a store that keeps its own form to
//! drop them again, and is moved through three calls on the way in. The in-memory store builds what it keeps straight from a draft,
//! cloning only what it keeps; every other store gets the `Waypoint` the
//! draft makes ([`Draft::take_waypoint`]).

use std::sync::Arc;
use std::time::SystemTime;

use super::types::Completed;
use super::{
    Activation, HandledFailure, NodeExecutionRecord, ParleyDelivery, PreviousGraph, Visits,
    Waypoint, WaypointStatus,
};
use crate::few::Few;
use crate::graph::GraphManifest;
use crate::state::Battlefield;

/// A waypoint's parts: what it alone holds by value, what its writer
/// keeps holding by reference.
pub(crate) struct Draft<'a> {
    pub(crate) thread_id: &'a Arc<str>,
    pub(crate) seq: u64,
    pub(crate) superstep: u32,
    pub(crate) status: WaypointStatus,
    pub(crate) state: &'a Battlefield,
    pub(crate) vanguard: &'a Arc<[Activation]>,
    pub(crate) interrupted: bool,
    pub(crate) completed: Completed,
    pub(crate) records: Few<NodeExecutionRecord>,
    pub(crate) parley: Option<&'a Arc<ParleyDelivery>>,
    pub(crate) visits: Visits,
    pub(crate) fingerprint: &'a Arc<str>,
    pub(crate) manifest: Option<&'a Arc<GraphManifest>>,
    pub(crate) previous_graph: Option<&'a Arc<PreviousGraph>>,
    pub(crate) handled: &'a [HandledFailure],
    pub(crate) created_at: SystemTime,
}

impl Draft<'_> {
    /// The waypoint itself, for a store that takes one: what the draft
    /// lends is cloned, what it owns taken out of it.
    pub(crate) fn take_waypoint(&mut self) -> Waypoint {
        // Every field named: a new one must be drafted too.
        let Draft {
            thread_id,
            seq,
            superstep,
            status,
            state,
            vanguard,
            interrupted,
            completed,
            records,
            parley,
            visits,
            fingerprint,
            manifest,
            previous_graph,
            handled,
            created_at,
        } = self;
        Waypoint {
            thread_id: Arc::clone(thread_id).into(),
            seq: *seq,
            superstep: *superstep,
            status: std::mem::replace(status, WaypointStatus::Running),
            state: Battlefield::clone(state),
            vanguard: Arc::clone(vanguard),
            interrupted: *interrupted,
            completed: std::mem::take(completed),
            records: std::mem::take(records).into(),
            parley: parley.cloned(),
            visits: std::mem::take(visits),
            fingerprint: Arc::clone(fingerprint).into(),
            manifest: manifest.cloned(),
            previous_graph: previous_graph.cloned(),
            handled: handled.to_vec(),
            created_at: *created_at,
        }
    }
}

impl Waypoint {
    /// Lends this waypoint to `f` as a draft (the in-memory store's way in
    /// for a waypoint written whole, through [`WaypointStore::put`]).
    ///
    /// [`WaypointStore::put`]: super::WaypointStore::put
    pub(crate) fn lend<R>(self, f: impl FnOnce(Draft<'_>) -> R) -> R {
        let Waypoint {
            thread_id,
            seq,
            superstep,
            status,
            state,
            vanguard,
            interrupted,
            completed,
            records,
            parley,
            visits,
            fingerprint,
            manifest,
            previous_graph,
            handled,
            created_at,
        } = self;
        f(Draft {
            thread_id: thread_id.shared(),
            seq,
            superstep,
            status,
            state: &state,
            vanguard: &vanguard,
            interrupted,
            completed,
            records: records.into(),
            parley: parley.as_ref(),
            visits,
            fingerprint: fingerprint.shared(),
            manifest: manifest.as_ref(),
            previous_graph: previous_graph.as_ref(),
            handled: &handled,
            created_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::NodeId;

    #[test]
    fn a_lent_waypoint_drafts_back_into_itself() {
        let mut w = Waypoint::new("t", 4, WaypointStatus::Completed, Battlefield::new())
            .with_visits([(NodeId::new("a"), 2)]);
        w.superstep = 3;
        w.vanguard = Arc::from([Activation::node("b")]);
        w.fingerprint = "v6:f".into();
        w.parley = Some(Arc::new(ParleyDelivery {
            nodes: vec![NodeId::new("a")],
            response: crate::graph::ParleyResponse::new(serde_json::json!("yes")),
        }));
        let back = w.clone().lend(|mut d| d.take_waypoint());
        let shown = |w: &Waypoint| serde_json::to_value(w).unwrap_or_default();
        assert_eq!(shown(&back), shown(&w));
        assert_eq!(back.created_at, w.created_at);
    }
}
