//! `Kept`: a waypoint as the in-memory store holds it.
//!
//! A run keeps one waypoint per superstep, so what each one costs to hold
//! is what a long in-memory thread costs (in a fresh process every page of
//! it is one the kernel must zero first). The public [`Waypoint`] carries what the store already
//! knows and keeps everything in its general form; `Kept` keeps the common
//! case in place and the rest behind one pointer:
//!
//! - the thread id and the position: the thread's history holds them;
//! - the graph (fingerprint, manifest, previous graph): the same for every
//!   waypoint of a run, so the thread keeps it once per change ([`GraphOf`]);
//! - a superstep's one plain record, in place ([`PlainRecord`]);
//! - the status, when it is `Running` or `Completed`, as a tag;
//! - what few waypoints carry (another status, a parley answer, handled
//!   failures) in one [`Rare`] box.
//!
//! So a chain's superstep needs no allocation of its own. (Times stay
//! `SystemTime`s: converting them to nanoseconds costs more than the bytes
//! it would save.)

use std::sync::Arc;
use std::time::SystemTime;

use super::types::Completed;
use super::{
    Activation, Draft, HandledFailure, NodeExecutionRecord, ParleyDelivery, PreviousGraph, Visits,
};
use super::{NodeStatus, Waypoint, WaypointStatus};
use crate::few::Few;
use crate::graph::GraphManifest;
use crate::id::{GraphFingerprint, NodeId, ThreadId};
use crate::state::Battlefield;
use crate::trace::CacheOrigin;

/// A waypoint without what its thread holds for it: its thread id, its
/// position and its graph.
#[derive(Debug)]
pub(super) struct Kept {
    superstep: u32,
    interrupted: bool,
    status: Status,
    state: Battlefield,
    vanguard: Arc<[Activation]>,
    completed: Completed,
    records: Records,
    visits: Visits,
    created_at: SystemTime,
    rare: Option<Box<Rare>>,
}

/// The status: every waypoint but a thread's last one or two is `Running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Running,
    Completed,
    /// In [`Rare::status`].
    Other,
}

/// What a waypoint carries only now and then.
#[derive(Debug)]
struct Rare {
    /// A status other than `Running` and `Completed`.
    status: Option<WaypointStatus>,
    parley: Option<Arc<ParleyDelivery>>,
    handled: Box<[HandledFailure]>,
}

/// The graph a thread's waypoints were written under: its thread keeps one
/// per change, not one per waypoint.
#[derive(Debug, Clone)]
pub(super) struct GraphOf {
    fingerprint: GraphFingerprint,
    manifest: Option<Arc<GraphManifest>>,
    previous_graph: Option<Arc<PreviousGraph>>,
}

impl GraphOf {
    /// The graph `draft` was written under.
    pub(super) fn of(draft: &Draft<'_>) -> Self {
        GraphOf {
            fingerprint: draft.fingerprint.clone().into(),
            manifest: draft.manifest.cloned(),
            previous_graph: draft.previous_graph.cloned(),
        }
    }

    /// Whether `draft` was written under this graph: the same fingerprint
    /// and the very same manifest and previous graph.
    pub(super) fn holds(&self, draft: &Draft<'_>) -> bool {
        self.fingerprint.as_str() == &**draft.fingerprint
            && same_arc(self.manifest.as_ref(), draft.manifest)
            && same_arc(self.previous_graph.as_ref(), draft.previous_graph)
    }
}

/// Whether both are absent or both the very same allocation.
fn same_arc<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// A superstep's records: a chain's one, when it holds no more than its
/// node, outcome and times (nearly always), in place and without the
/// fields it leaves empty; any other list as it came (the engine sizes it exactly,
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
            && !r.has_extras()
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
            extras: _,
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
            extras: None,
        }
    }
}

impl Records {
    fn new(records: Few<NodeExecutionRecord>) -> Self {
        match records {
            Few::One(only) if PlainRecord::fits(&only) => Records::Plain(PlainRecord::of(only)),
            other => Records::Many(Vec::from(other).into_boxed_slice()),
        }
    }

    fn to_vec(&self) -> Vec<NodeExecutionRecord> {
        match self {
            Records::Plain(plain) => vec![plain.record()],
            Records::Many(all) => all.to_vec(),
        }
    }
}

impl Kept {
    /// Keeps `draft`, whose thread id, position and graph the caller holds
    /// ([`GraphOf::holds`]): what it lends is cloned only if kept, what it
    /// owns is taken out (lent by reference, so the draft, its record in
    /// place, is not copied on the way in).
    #[inline]
    pub(super) fn new(draft: &mut Draft<'_>) -> Self {
        // Every field named: a new one must be kept here, or the store
        // would lose it.
        let Draft {
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
            fingerprint: _,
            manifest: _,
            previous_graph: _,
            handled,
            created_at,
        } = draft;
        let status = std::mem::replace(status, WaypointStatus::Running);
        let (status, other) = match status {
            WaypointStatus::Running => (Status::Running, None),
            WaypointStatus::Completed => (Status::Completed, None),
            other => (Status::Other, Some(other)),
        };
        let rare = (other.is_some() || parley.is_some() || !handled.is_empty()).then(|| {
            Box::new(Rare {
                status: other,
                parley: parley.cloned(),
                handled: (*handled).into(),
            })
        });
        Kept {
            superstep: *superstep,
            interrupted: *interrupted,
            status,
            state: Battlefield::clone(state),
            vanguard: Arc::clone(vanguard),
            completed: std::mem::take(completed),
            records: Records::new(std::mem::take(records)),
            visits: std::mem::take(visits),
            created_at: *created_at,
            rare,
        }
    }

    /// The waypoint at position `seq` of the thread `thread_id`, written
    /// under `graph`.
    pub(super) fn waypoint(&self, thread_id: &ThreadId, seq: u64, graph: &GraphOf) -> Waypoint {
        let rare = self.rare.as_deref();
        Waypoint {
            thread_id: thread_id.clone(),
            seq,
            superstep: self.superstep,
            status: match (self.status, rare.and_then(|r| r.status.as_ref())) {
                (Status::Running, _) => WaypointStatus::Running,
                (Status::Completed, _) => WaypointStatus::Completed,
                (Status::Other, Some(status)) => status.clone(),
                // `new` keeps every other status in `rare`.
                (Status::Other, None) => WaypointStatus::Running,
            },
            state: self.state.clone(),
            vanguard: self.vanguard.clone(),
            interrupted: self.interrupted,
            completed: self.completed.clone(),
            records: self.records.to_vec(),
            parley: rare.and_then(|r| r.parley.clone()),
            visits: self.visits.clone(),
            fingerprint: graph.fingerprint.clone(),
            manifest: graph.manifest.clone(),
            previous_graph: graph.previous_graph.clone(),
            handled: rare.map(|r| r.handled.to_vec()).unwrap_or_default(),
            created_at: self.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{NodeError, NodeErrorSource, Transience};
    use crate::policy::CacheScope;
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
            extras: None,
        }
    }

    /// What `Kept` gives back, as the JSON the codec would write: every
    /// public field and the persistent ones behind accessors.
    fn shown(w: &Waypoint) -> serde_json::Value {
        serde_json::to_value(w).unwrap_or_default()
    }

    /// `w` kept, and the graph it was written under.
    fn keep(w: Waypoint) -> (Kept, GraphOf) {
        w.lend(|mut d| {
            let graph = GraphOf::of(&d);
            (Kept::new(&mut d), graph)
        })
    }

    /// `w` kept and read back at position `seq`.
    fn round_trip(w: Waypoint, seq: u64) -> Waypoint {
        let (kept, graph) = keep(w);
        kept.waypoint(&ThreadId::from("t"), seq, &graph)
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
                let back = round_trip(w.clone(), i as u64);
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
            scope: CacheScope::Graph,
        }));
        // Served under a node-scoped key: the scope is kept too.
        let mut node_scoped_hit = hit.clone();
        node_scoped_hit.cache_origin = hit.cache_origin.as_deref().map(|o| {
            Arc::new(CacheOrigin {
                scope: CacheScope::Node,
                ..o.clone()
            })
        });
        let mut task = record("w");
        task.task_key = Some("k1".into());
        let mut retried = record("a");
        retried.attempt = 2;
        retried.attempts = vec![crate::waypoint::AttemptRecord {
            attempt: 1,
            started_at: SystemTime::UNIX_EPOCH,
            duration_ms: 1,
            error: error("once"),
            spend: None,
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
            (node_scoped_hit, true),
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
            let (kept, graph) = keep(w);
            assert_eq!(matches!(kept.records, Records::Plain(_)), plain, "{r:?}");
            assert_eq!(
                kept.waypoint(&ThreadId::from("t"), 0, &graph).records,
                vec![r]
            );
        }
    }

    #[test]
    fn a_plain_one_record_superstep_costs_no_allocation_of_its_own() {
        // The point of the type: a chain's waypoint is one block in the
        // store's chunk, not a waypoint and a `Vec` of one.
        let mut w = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
        w.records = vec![record("a")];
        let (kept, _) = keep(w);
        assert!(matches!(kept.records, Records::Plain(_)));
        assert!(kept.rare.is_none());
        assert!(
            std::mem::size_of::<Kept>() <= 144,
            "the module's docs say 144 bytes"
        );
    }

    #[test]
    fn a_parley_answer_and_another_status_come_back() {
        let mut w = Waypoint::new(
            "t",
            3,
            WaypointStatus::AwaitingInput {
                requests: vec![(
                    NodeId::new("gate"),
                    crate::graph::ParleyRequest::new("approve?"),
                )],
            },
            Battlefield::new(),
        );
        w.parley = Some(Arc::new(ParleyDelivery {
            nodes: vec![NodeId::new("gate")],
            response: crate::graph::ParleyResponse::new(serde_json::json!("yes")),
        }));
        let back = round_trip(w.clone(), 3);
        assert_eq!(shown(&back), shown(&w));
        assert_eq!(back.status, w.status);
        assert_eq!(back.parley, w.parley);
    }

    #[test]
    fn the_graph_comes_back_from_its_thread() {
        let mut w = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
        w.fingerprint = GraphFingerprint::from("v6:abc");
        w.manifest = None;
        let (kept, graph) = keep(w.clone());
        assert!(w.clone().lend(|d| graph.holds(&d)));
        let back = kept.waypoint(&ThreadId::from("t"), 0, &graph);
        assert_eq!(back.fingerprint, w.fingerprint);
        assert_eq!(shown(&back), shown(&w));
        // Another fingerprint is another graph.
        let mut other = w.clone();
        other.fingerprint = GraphFingerprint::from("v6:abd");
        assert!(!other.lend(|d| graph.holds(&d)));
    }
}
