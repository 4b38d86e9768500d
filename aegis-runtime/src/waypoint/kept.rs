//! `Kept`: a waypoint as the in-memory store holds it.
//!
//! A run keeps one waypoint per superstep, so what each one costs to hold
//! is what a long in-memory thread costs: in a fresh process every 4 KiB
//! of it is a page the kernel must zero first, and that was a fifth of a
//! chain's time. The public [`Waypoint`] carries what the store already
//! knows (the thread id and the position) and keeps its records and its
//! status in their general forms; `Kept` drops the first and keeps the
//! common case of the second inline: 304 bytes and no allocation of its
//! own for a chain's superstep, where the `Waypoint` and its one-record
//! `Vec` were 392 bytes in two.

use std::sync::Arc;
use std::time::SystemTime;

use super::types::Completed;
use super::{
    Activation, HandledFailure, NodeExecutionRecord, ParleyDelivery, PreviousGraph, Visits,
};
use super::{Waypoint, WaypointStatus};
use crate::graph::GraphManifest;
use crate::id::{GraphFingerprint, ThreadId};
use crate::state::Battlefield;

/// A waypoint without its thread id and position, which its thread's
/// history holds for all of them.
#[derive(Debug)]
pub(super) struct Kept {
    superstep: u32,
    interrupted: bool,
    status: Status,
    state: Battlefield,
    vanguard: Arc<[Activation]>,
    completed: Completed,
    records: Records,
    parley: Option<Arc<ParleyDelivery>>,
    visits: Visits,
    fingerprint: GraphFingerprint,
    manifest: Option<Arc<GraphManifest>>,
    previous_graph: Option<Arc<PreviousGraph>>,
    /// Exactly sized (nearly always empty, and then not allocated).
    handled: Box<[HandledFailure]>,
    created_at: SystemTime,
}

/// The status: every waypoint but a thread's last one or two is `Running`.
#[derive(Debug)]
enum Status {
    Running,
    Completed,
    Other(Box<WaypointStatus>),
}

/// A superstep's records: a chain's one is kept in place.
#[derive(Debug)]
enum Records {
    One(NodeExecutionRecord),
    Many(Box<[NodeExecutionRecord]>),
}

impl Kept {
    /// Keeps `w`, whose thread id and position the caller holds.
    pub(super) fn new(w: Waypoint) -> Self {
        // Every field named: a new one must be kept here, or the store
        // would lose it.
        let Waypoint {
            thread_id: _,
            seq: _,
            superstep,
            status,
            state,
            vanguard,
            interrupted,
            completed,
            mut records,
            parley,
            visits,
            fingerprint,
            manifest,
            previous_graph,
            handled,
            created_at,
        } = w;
        let status = match status {
            WaypointStatus::Running => Status::Running,
            WaypointStatus::Completed => Status::Completed,
            other => Status::Other(Box::new(other)),
        };
        let records = match records.pop() {
            Some(only) if records.is_empty() => Records::One(only),
            Some(last) => {
                records.push(last);
                Records::Many(records.into_boxed_slice())
            }
            None => Records::Many(Box::default()),
        };
        Kept {
            superstep,
            interrupted,
            status,
            state,
            vanguard,
            completed,
            records,
            parley,
            visits,
            fingerprint,
            manifest,
            previous_graph,
            handled: handled.into_boxed_slice(),
            created_at,
        }
    }

    /// The waypoint at position `seq` of the thread `thread_id`.
    pub(super) fn waypoint(&self, thread_id: &ThreadId, seq: u64) -> Waypoint {
        Waypoint {
            thread_id: thread_id.clone(),
            seq,
            superstep: self.superstep,
            status: match &self.status {
                Status::Running => WaypointStatus::Running,
                Status::Completed => WaypointStatus::Completed,
                Status::Other(status) => WaypointStatus::clone(status),
            },
            state: self.state.clone(),
            vanguard: self.vanguard.clone(),
            interrupted: self.interrupted,
            completed: self.completed.clone(),
            records: match &self.records {
                Records::One(only) => vec![only.clone()],
                Records::Many(all) => all.to_vec(),
            },
            parley: self.parley.clone(),
            visits: self.visits.clone(),
            fingerprint: self.fingerprint.clone(),
            manifest: self.manifest.clone(),
            previous_graph: self.previous_graph.clone(),
            handled: self.handled.to_vec(),
            created_at: self.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{NodeError, NodeErrorSource, Transience};
    use crate::id::NodeId;
    use crate::waypoint::{HandlerKind, NodeStatus};

    fn error(message: &str) -> NodeError {
        let source = NodeErrorSource::Function {
            message: message.into(),
        };
        NodeError::new(NodeId::new("a"), 1, Transience::Permanent, source)
    }

    fn record(node: &str) -> NodeExecutionRecord {
        NodeExecutionRecord {
            node_id: NodeId::new(node),
            task_key: None,
            status: NodeStatus::Succeeded,
            attempt: 1,
            attempts: Vec::new(),
            cache_hit: false,
            cache_origin: None,
            started_at: SystemTime::UNIX_EPOCH,
            duration_ms: 3,
            retry_skipped: None,
        }
    }

    /// What `Kept` gives back, as the JSON the codec would write: every
    /// public field and the persistent ones behind accessors.
    fn shown(w: &Waypoint) -> serde_json::Value {
        serde_json::to_value(w).unwrap_or_default()
    }

    #[test]
    fn gives_back_every_status_and_any_number_of_records() {
        let failed = WaypointStatus::Failed {
            error: "boom".into(),
            node_error: Some(Box::new(error("boom"))),
        };
        let statuses = [
            WaypointStatus::Running,
            WaypointStatus::Completed,
            failed,
            WaypointStatus::Halted {
                reason: "cancelled".into(),
            },
        ];
        for (i, status) in statuses.into_iter().enumerate() {
            for records in [vec![], vec![record("a")], vec![record("a"), record("b")]] {
                let mut w = Waypoint::new("t", i as u64, status.clone(), Battlefield::new())
                    .with_visits([(NodeId::new("a"), 2)]);
                w.superstep = 7;
                w.records = records;
                w.handled = vec![HandledFailure {
                    node_id: NodeId::new("a"),
                    task_key: Some("k".into()),
                    superstep: 6,
                    error: error("x"),
                    handler: HandlerKind::Absorb,
                }];
                let back = Kept::new(w.clone()).waypoint(&ThreadId::from("t"), i as u64);
                assert_eq!(shown(&back), shown(&w));
                assert_eq!(back.records.len(), w.records.len());
                assert_eq!(back.status, w.status);
            }
        }
    }

    #[test]
    fn a_one_record_superstep_costs_no_allocation_of_its_own() {
        // The point of the type: a chain's waypoint is one block in the
        // store's chunk, not a waypoint and a `Vec` of one.
        let mut w = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
        w.records = vec![record("a")];
        assert!(matches!(Kept::new(w).records, Records::One(_)));
    }
}
