//! `Kept`: a waypoint as the in-memory store holds it.
//!
//! A run keeps one waypoint per superstep, so what each one costs to hold
//! is what a long in-memory thread costs: in a fresh process every 4 KiB
//! of it is a page the kernel must zero first, and that was a fifth of a
//! chain's time. The public [`Waypoint`] carries what the store already
//! knows (the thread id and the position) and keeps its records and its
//! status in their general forms; `Kept` drops the first and keeps the
//! common case of the second inline: 216 bytes and no allocation of its
//! own for a chain's superstep, where the `Waypoint` and its one-record
//! `Vec` were 392 bytes in two.

use std::sync::Arc;
use std::time::SystemTime;

use super::types::Completed;
use super::{
    Activation, HandledFailure, NodeExecutionRecord, ParleyDelivery, PreviousGraph, Visits,
};
use super::{NodeStatus, Waypoint, WaypointStatus};
use crate::graph::GraphManifest;
use crate::id::{GraphFingerprint, NodeId, ThreadId};
use crate::state::Battlefield;
use crate::trace::CacheOrigin;

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

/// A superstep's records: a chain's one, when it holds no more than its
/// node, outcome and times (nearly always), in place and in a third of a
/// record's size; any other list as it came (the engine sizes it exactly,
/// so boxing it keeps its allocation).
#[derive(Debug)]
enum Records {
    Plain(PlainRecord),
    Many(Box<[NodeExecutionRecord]>),
}

/// A record with no task key, no failed attempts, no skipped retry, and
/// not skipped itself.
#[derive(Debug)]
struct PlainRecord {
    node_id: NodeId,
    cache_origin: Option<Arc<CacheOrigin>>,
    started_at: SystemTime,
    duration_ms: u64,
    attempt: u32,
    failed: bool,
    cache_hit: bool,
}

impl PlainRecord {
    /// Whether `r` holds no more than a plain record keeps (checked in
    /// place: a record that is not plain is not moved at all).
    fn fits(r: &NodeExecutionRecord) -> bool {
        !matches!(r.status, NodeStatus::Skipped { .. })
            && r.task_key.is_none()
            && r.attempts.is_empty()
            && r.retry_skipped.is_none()
    }

    /// `r`, which [`fits`](Self::fits).
    fn of(r: NodeExecutionRecord) -> Self {
        // Every field named: a new one must be checked in `fits`, or the
        // store would lose it.
        let NodeExecutionRecord {
            node_id,
            task_key: _,
            status,
            attempt,
            attempts: _,
            cache_hit,
            cache_origin,
            started_at,
            duration_ms,
            retry_skipped: _,
        } = r;
        PlainRecord {
            node_id,
            cache_origin,
            started_at,
            duration_ms,
            attempt,
            failed: status == NodeStatus::Failed,
            cache_hit,
        }
    }

    fn record(&self) -> NodeExecutionRecord {
        NodeExecutionRecord {
            node_id: self.node_id.clone(),
            task_key: None,
            status: if self.failed {
                NodeStatus::Failed
            } else {
                NodeStatus::Succeeded
            },
            attempt: self.attempt,
            attempts: Vec::new(),
            cache_hit: self.cache_hit,
            cache_origin: self.cache_origin.clone(),
            started_at: self.started_at,
            duration_ms: self.duration_ms,
            retry_skipped: None,
        }
    }
}

impl Records {
    fn new(mut records: Vec<NodeExecutionRecord>) -> Self {
        if let [only] = records.as_slice()
            && PlainRecord::fits(only)
            && let Some(only) = records.pop()
        {
            return Records::Plain(PlainRecord::of(only));
        }
        Records::Many(records.into_boxed_slice())
    }

    fn to_vec(&self) -> Vec<NodeExecutionRecord> {
        match self {
            Records::Plain(plain) => vec![plain.record()],
            Records::Many(all) => all.to_vec(),
        }
    }
}

impl Kept {
    /// Keeps `w`, whose thread id and position the caller holds.
    #[inline]
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
            records,
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
        Kept {
            superstep,
            interrupted,
            status,
            state,
            vanguard,
            completed,
            records: Records::new(records),
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
            records: self.records.to_vec(),
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
    use crate::waypoint::HandlerKind;

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
                assert_eq!(back.records, w.records);
                assert_eq!(back.status, w.status);
            }
        }
    }

    /// One record of each shape: plain ones (succeeded, failed, served
    /// from the cache) and every way a record is not plain.
    fn single_records() -> Vec<(NodeExecutionRecord, bool)> {
        let plain = record("a");
        let mut failed = record("a");
        failed.status = NodeStatus::Failed;
        failed.attempt = 3;
        let mut hit = record("a");
        hit.cache_hit = true;
        hit.cache_origin = Some(Arc::new(CacheOrigin {
            node_id: NodeId::new("a"),
            task_key: None,
            thread_id: Some("earlier".into()),
            attempt: 2,
            served_by: None,
            model: None,
            chain_position: None,
            fallback: false,
        }));
        let mut task = record("w");
        task.task_key = Some("k1".into());
        let mut retried = record("a");
        retried.attempt = 2;
        retried.attempts = vec![crate::waypoint::AttemptRecord {
            attempt: 1,
            started_at: SystemTime::UNIX_EPOCH,
            duration_ms: 1,
            error: error("once"),
        }];
        let mut skipped_retry = record("a");
        skipped_retry.status = NodeStatus::Failed;
        skipped_retry.retry_skipped = Some(crate::waypoint::RetrySkip {
            attempt: 2,
            wait_ms: 30_000,
            remaining_ms: 10,
            bound: crate::trace::BudgetBound::RunBudget,
        });
        let mut skipped = record("a");
        skipped.status = NodeStatus::Skipped {
            reason: "shutdown".into(),
        };
        vec![
            (plain, true),
            (failed, true),
            (hit, true),
            (task, false),
            (retried, false),
            (skipped_retry, false),
            (skipped, false),
        ]
    }

    #[test]
    fn gives_back_a_single_record_of_any_shape_exactly() {
        for (r, plain) in single_records() {
            let mut w = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
            w.records = vec![r.clone()];
            let kept = Kept::new(w);
            assert_eq!(matches!(kept.records, Records::Plain(_)), plain, "{r:?}");
            assert_eq!(kept.waypoint(&ThreadId::from("t"), 0).records, vec![r]);
        }
    }

    #[test]
    fn a_plain_one_record_superstep_costs_no_allocation_of_its_own() {
        // The point of the type: a chain's waypoint is one block in the
        // store's chunk, not a waypoint and a `Vec` of one.
        let mut w = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
        w.records = vec![record("a")];
        assert!(matches!(Kept::new(w).records, Records::Plain(_)));
    }
}
