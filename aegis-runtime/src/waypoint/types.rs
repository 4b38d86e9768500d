//! What a waypoint records: its status, its state and the activations due next.

use imbl::Vector;
use serde::Deserialize;
use serde::Serialize;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::NodeError;
use crate::graph::{Directive, GraphManifest, MusterTask, ParleyRequest, ParleyResponse};
use crate::id::{GraphFingerprint, NodeId, ThreadId};
use crate::state::Battlefield;
use crate::waypoint::{HandledFailure, NodeExecutionRecord, Visits};

/// One activation due in a superstep: a node, or one mustered task of a
/// worker template. Ordered by node id, then task index (vanguard order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Activation {
    /// The node to run.
    pub node_id: NodeId,
    /// The task, when the node runs as a mustered task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<MusterTask>,
}

impl Activation {
    /// An activation of `node_id`.
    pub fn node(node_id: impl Into<NodeId>) -> Self {
        Activation {
            node_id: node_id.into(),
            task: None,
        }
    }

    /// A mustered task of the worker template `node_id`.
    pub fn task(node_id: impl Into<NodeId>, task: MusterTask) -> Self {
        Activation {
            node_id: node_id.into(),
            task: Some(task),
        }
    }

    /// The task key, for a mustered task.
    pub fn task_key(&self) -> Option<&str> {
        self.task.as_ref().map(|t| t.task_key.as_str())
    }

    fn order_key(&self) -> (&NodeId, Option<u32>) {
        (&self.node_id, self.task.as_ref().map(|t| t.index))
    }
}

impl PartialOrd for Activation {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Activation {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order_key().cmp(&other.order_key())
    }
}

/// A parley answer on its way to the activations that asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParleyDelivery {
    /// The nodes that parleyed.
    pub nodes: Vec<NodeId>,
    /// The answer they get on their re-run.
    pub response: ParleyResponse,
}

impl ParleyDelivery {
    /// `response`, for the gates `nodes`.
    pub fn new(nodes: Vec<NodeId>, response: ParleyResponse) -> Self {
        ParleyDelivery { nodes, response }
    }
}

/// An activation that finished inside a superstep the run has not closed yet
/// (it was halted or failed mid-way): resume reuses it instead of re-running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompletedActivation {
    /// What ran.
    pub activation: Activation,
    /// What it returned (after any handler).
    pub directive: Directive,
    /// Its record.
    pub record: NodeExecutionRecord,
    /// Set when the node failed and its `on_error` handler supplied
    /// `directive` (absent in rows written before it existed). Boxed: a
    /// rare case, and inline it was two fifths of every completed task,
    /// which a muster's progress waypoints keep one of per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled: Option<Box<HandledFailure>>,
}

impl CompletedActivation {
    /// Sets [`handled`](Self::handled): set when the node failed and its `on_error`
    /// handler supplied `directive` (absent in rows written before it existed).
    #[must_use]
    pub fn with_handled(mut self, handled: impl Into<Option<Box<HandledFailure>>>) -> Self {
        self.handled = handled.into();
        self
    }
}

impl CompletedActivation {
    /// `activation` finished with `directive`, as `record` says, no failure
    /// handled.
    pub fn new(activation: Activation, directive: Directive, record: NodeExecutionRecord) -> Self {
        CompletedActivation {
            activation,
            directive,
            record,
            handled: None,
        }
    }
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
        /// Boxed: inline it would make every waypoint's status as large as
        /// a node error, where nearly every waypoint is `Running`.
        node_error: Option<Box<NodeError>>,
    },
    /// The run was cancelled; `resume` continues it.
    Halted {
        /// Why.
        reason: String,
    },
    /// The run waits for a human: `resume` with a `ParleyResponse`.
    AwaitingInput {
        /// Each node that parleyed, with its question.
        requests: Vec<(NodeId, ParleyRequest)>,
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
            WaypointStatus::AwaitingInput { .. } => "AwaitingInput",
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
#[non_exhaustive]
pub struct Waypoint {
    /// The thread.
    pub thread_id: ThreadId,
    /// The position of this waypoint in its thread: 0, 1, 2, ...
    pub seq: u64,
    /// The superstep this waypoint closes (or interrupts); 0 for the input.
    pub superstep: u32,
    /// Where the thread stands.
    pub status: WaypointStatus,
    /// The state (see the type's docs for which).
    pub state: Battlefield,
    /// The activations due.
    /// Shared: the progress waypoints of one superstep all hold the same one.
    pub vanguard: Arc<[Activation]>,
    /// Whether this waypoint was written mid-superstep.
    pub interrupted: bool,
    /// The finished part of an interrupted superstep (read it with
    /// [`Waypoint::completed`]). Each one shared: a persistent vector copies
    /// whole chunks of its elements, so they are kept pointer-sized. Not
    /// public: the persistent collection's crate is not part of our API.
    pub(crate) completed: Completed,
    /// The node records of this superstep.
    pub records: Vec<NodeExecutionRecord>,
    /// A parley answer to hand to the next superstep's activations.
    /// Shared, as are `previous_graph` and the manifest: every waypoint of
    /// the superstep (or of a migrated thread) holds the same one, and a
    /// waypoint kept per superstep should not carry them inline.
    pub parley: Option<Arc<ParleyDelivery>>,
    /// How often each node has been activated in this thread (read it with
    /// [`Waypoint::visits`]). Shared with the waypoints before it: writing
    /// a waypoint per superstep must not copy one entry per node of the
    /// graph each time (see `Visits`).
    pub(crate) visits: Visits,
    /// The fingerprint of the graph that wrote it.
    pub fingerprint: GraphFingerprint,
    /// The shape of the graph that wrote it (node kinds, field rules), so a
    /// resume on a changed graph can tell what changed. `None` in waypoints
    /// written before manifests were stored (format 1).
    #[serde(default)]
    pub manifest: Option<Arc<GraphManifest>>,
    /// Set on every waypoint written since a resume moved the thread onto
    /// this graph from another one (a compatible change or a migration).
    #[serde(default)]
    pub previous_graph: Option<Arc<PreviousGraph>>,
    /// Every failure in this thread so far whose `on_error` handler ran, in
    /// the order of their supersteps (vanguard order within one): a
    /// Completed run that compensated a failure lists it here, a clean one
    /// lists nothing. Empty in waypoints written before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handled: Vec<HandledFailure>,
    /// When it was written.
    pub created_at: SystemTime,
}

impl Waypoint {
    /// Sets [`handled`](Self::handled): every failure in this thread so far whose `on_error` handler ran, in the order of their supersteps (vanguard order within one): a Completed run that compensated a failure lists it here, a clean one lists nothing.
    #[must_use]
    pub fn with_handled(mut self, handled: Vec<HandledFailure>) -> Self {
        self.handled = handled;
        self
    }
}

impl Waypoint {
    /// Sets [`superstep`](Self::superstep): the superstep this waypoint closes (or
    /// interrupts); 0 for the input.
    #[must_use]
    pub fn with_superstep(mut self, superstep: u32) -> Self {
        self.superstep = superstep;
        self
    }

    /// Sets [`vanguard`](Self::vanguard): the activations due (a `Vec`, or
    /// the shared slice itself).
    #[must_use]
    pub fn with_vanguard(mut self, vanguard: impl Into<Arc<[Activation]>>) -> Self {
        self.vanguard = vanguard.into();
        self
    }

    /// Sets [`interrupted`](Self::interrupted): whether this waypoint was written
    /// mid-superstep.
    #[must_use]
    pub fn with_interrupted(mut self, interrupted: bool) -> Self {
        self.interrupted = interrupted;
        self
    }

    /// Sets [`records`](Self::records): the node records of this superstep.
    #[must_use]
    pub fn with_records(mut self, records: Vec<NodeExecutionRecord>) -> Self {
        self.records = records;
        self
    }

    /// Sets [`parley`](Self::parley): a parley answer to hand to the next
    /// superstep's activations.
    #[must_use]
    pub fn with_parley(mut self, parley: impl Into<Option<Arc<ParleyDelivery>>>) -> Self {
        self.parley = parley.into();
        self
    }

    /// Sets [`fingerprint`](Self::fingerprint): the fingerprint of the graph that
    /// wrote it.
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: GraphFingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// Sets [`manifest`](Self::manifest): the shape of the graph that wrote it
    /// (node kinds, field rules), so a resume on a changed graph can tell what
    /// changed.
    #[must_use]
    pub fn with_manifest(mut self, manifest: impl Into<Option<Arc<GraphManifest>>>) -> Self {
        self.manifest = manifest.into();
        self
    }

    /// Sets [`previous_graph`](Self::previous_graph): set on every waypoint written
    /// since a resume moved the thread onto this graph from another one (a
    /// compatible change or a migration).
    #[must_use]
    pub fn with_previous_graph(
        mut self,
        previous_graph: impl Into<Option<Arc<PreviousGraph>>>,
    ) -> Self {
        self.previous_graph = previous_graph.into();
        self
    }

    /// Sets [`created_at`](Self::created_at): when it was written.
    #[must_use]
    pub fn with_created_at(mut self, created_at: SystemTime) -> Self {
        self.created_at = created_at;
        self
    }
}

impl Waypoint {
    /// A waypoint at position `seq` of `thread_id`, holding `state`:
    /// superstep 0, no vanguard, not interrupted, nothing completed, no
    /// records, no parley, no visits, an empty fingerprint, written now. Set
    /// the public fields and use the `with_` methods for the rest: for a
    /// store's tests, or a store that decodes its rows by hand.
    pub fn new(
        thread_id: impl Into<ThreadId>,
        seq: u64,
        status: WaypointStatus,
        state: Battlefield,
    ) -> Self {
        Waypoint {
            thread_id: thread_id.into(),
            seq,
            superstep: 0,
            status,
            state,
            vanguard: Arc::from([]),
            interrupted: false,
            completed: Completed::default(),
            records: Vec::new(),
            parley: None,
            visits: Visits::default(),
            fingerprint: GraphFingerprint::default(),
            manifest: None,
            previous_graph: None,
            handled: Vec::new(),
            created_at: SystemTime::now(),
        }
    }

    /// This waypoint with `completed` as the finished part of its
    /// (interrupted) superstep, in vanguard order.
    pub fn with_completed(
        mut self,
        completed: impl IntoIterator<Item = CompletedActivation>,
    ) -> Self {
        self.completed = completed
            .into_iter()
            .map(Arc::new)
            .collect::<Vector<_>>()
            .into();
        self
    }

    /// This waypoint with `visits` as the thread's activation counts.
    pub fn with_visits(mut self, visits: impl IntoIterator<Item = (NodeId, u32)>) -> Self {
        self.visits = visits.into_iter().collect();
        self
    }

    /// The finished part of an interrupted superstep, in the order it
    /// finished; empty for a waypoint written at a barrier.
    pub fn completed(&self) -> impl ExactSizeIterator<Item = &CompletedActivation> + '_ {
        self.completed.iter().map(|c| &**c)
    }

    /// How often each node has been activated in this thread, by node id.
    pub fn visits(&self) -> impl ExactSizeIterator<Item = (&NodeId, u32)> + '_ {
        self.visits.counts().into_iter()
    }

    /// How often `node` has been activated in this thread (0 if never).
    pub fn visit_count(&self, node: &NodeId) -> u32 {
        self.visits.get(node)
    }
}

/// The finished part of an interrupted superstep as a waypoint keeps it:
/// nothing at all for one written at a barrier (nearly every waypoint), so
/// there it costs one word rather than a persistent vector's 64 bytes.
#[derive(Clone, Default)]
pub(crate) struct Completed(Option<Arc<Vector<Arc<CompletedActivation>>>>);

impl Completed {
    pub(crate) fn iter(&self) -> CompletedIter<'_> {
        CompletedIter(self.0.as_deref().map(Vector::iter))
    }

    /// The activations, as the run goes on from them.
    pub(crate) fn into_vector(self) -> Vector<Arc<CompletedActivation>> {
        self.0.map(Arc::unwrap_or_clone).unwrap_or_default()
    }
}

/// The activations of a [`Completed`], in order.
pub(crate) struct CompletedIter<'a>(
    Option<imbl::vector::Iter<'a, Arc<CompletedActivation>, imbl::shared_ptr::DefaultSharedPtr>>,
);

impl<'a> Iterator for CompletedIter<'a> {
    type Item = &'a Arc<CompletedActivation>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.as_mut()?.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.as_ref().map_or((0, Some(0)), Iterator::size_hint)
    }
}

impl ExactSizeIterator for CompletedIter<'_> {}

impl From<Vector<Arc<CompletedActivation>>> for Completed {
    fn from(v: Vector<Arc<CompletedActivation>>) -> Self {
        Completed((!v.is_empty()).then(|| Arc::new(v)))
    }
}

impl std::fmt::Debug for Completed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Stored as the sequence it holds, exactly as the vector it replaced was.
impl Serialize for Completed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Completed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vector::<Arc<CompletedActivation>>::deserialize(d)?.into())
    }
}

/// The graph a thread ran before a resume moved it onto the current one
/// (whose fingerprint is the waypoint's own), and how it moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PreviousGraph {
    /// Its fingerprint.
    pub fingerprint: String,
    /// Whether a migration ([`WarGraph::with_migration`](crate::graph::WarGraph::with_migration))
    /// carried the thread over, rather than the change being compatible as
    /// it was.
    pub migrated: bool,
    /// The migration's name ([`Migration::name`](crate::graph::Migration::name));
    /// `None` for a compatible change, and in rows written before
    /// migrations had names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<String>,
    /// The nodes the migration mapped, `(old, new)`, that the thread was
    /// about to run: its waiting node renamed, say. Empty when it mapped
    /// none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mapped_nodes: Vec<(NodeId, NodeId)>,
}

impl PreviousGraph {
    /// A thread moved from the graph `fingerprint` by a compatible change.
    pub fn new(fingerprint: impl Into<String>) -> Self {
        PreviousGraph {
            fingerprint: fingerprint.into(),
            migrated: false,
            migration: None,
            mapped_nodes: Vec::new(),
        }
    }

    /// The same move, carried by the migration named `name`, which mapped
    /// `mapped_nodes` of the thread's pending nodes.
    #[must_use]
    pub fn with_migration(
        mut self,
        name: impl Into<String>,
        mapped_nodes: impl IntoIterator<Item = (NodeId, NodeId)>,
    ) -> Self {
        self.migrated = true;
        self.migration = Some(name.into());
        self.mapped_nodes = mapped_nodes.into_iter().collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_pointer_sized_but_for_its_tag() {
        // Nearly every waypoint is `Running`; a `Failed` holding its node
        // error inline would make every status (and every waypoint kept in
        // memory) as large as a node error.
        assert!(
            std::mem::size_of::<WaypointStatus>() <= 40,
            "{}",
            std::mem::size_of::<WaypointStatus>()
        );
    }
}
