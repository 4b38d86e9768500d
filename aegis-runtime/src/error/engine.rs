//! Everything that stops a graph from validating, starting or finishing.

use std::fmt;
use std::time::Duration;

use super::NodeError;
use super::evolution::{self, GraphChange, Incompatibility};
use crate::error::StoreError;
use crate::id::NodeId;
use crate::id::ThreadIdError;
use crate::state::{DispatchRule, FieldName, MergeError, Writer};

/// One policy problem: which Aegis, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyOffender {
    /// The node whose own Aegis is at fault; `None` for the graph default.
    pub node: Option<NodeId>,
    /// What is wrong, for humans.
    pub reason: String,
}

impl PolicyOffender {
    pub(crate) fn new(node: Option<&NodeId>, reason: impl Into<String>) -> Self {
        PolicyOffender {
            node: node.cloned(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for PolicyOffender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(f, "`{n}`: {}", self.reason),
            None => write!(f, "default Aegis: {}", self.reason),
        }
    }
}

/// A reference to an edge, for validation messages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct EdgeRef {
    /// The source node.
    pub from: NodeId,
    /// The target node.
    pub to: NodeId,
}

impl fmt::Display for EdgeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.from, self.to)
    }
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

fn ids<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error of the engine: a graph that does not validate, a run that cannot
/// start or continue, or the reason a run that executed has failed.
///
/// Validation is fail-closed and lists every offender: each variant carries
/// all of them, and [`EngineError::ValidationFailed`] groups several kinds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Several kinds of validation problem at once, each listing its offenders.
    #[error("the graph is invalid:\n  - {}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n  - "))]
    ValidationFailed {
        /// One error per kind of problem.
        errors: Vec<EngineError>,
    },
    /// Node ids declared more than once.
    #[error("node ids declared more than once: {}", ids(nodes))]
    DuplicateNodeId {
        /// Every duplicated id.
        nodes: Vec<NodeId>,
    },
    /// Node ids that are empty or reserved (`__start__`, `__end__`).
    #[error("reserved or empty node ids: {}", ids(nodes))]
    ReservedNodeId {
        /// Every offending id.
        nodes: Vec<NodeId>,
    },
    /// Fields declared more than once in the schema.
    #[error("fields declared more than once: {}", ids(fields))]
    DuplicateField {
        /// Every duplicated field.
        fields: Vec<FieldName>,
    },
    /// Edges whose endpoint is not a declared node.
    #[error("edges to or from undeclared nodes: {}", list(edges))]
    UnknownEdgeEndpoint {
        /// Every such edge.
        edges: Vec<EdgeRef>,
    },
    /// No edge leaves `START`.
    #[error("the graph has no entry point: add an edge from START")]
    NoEntryPoint,
    /// Nodes nothing can reach: no edge, route or Gate leads to them from
    /// START, and they are not dynamic targets.
    #[error(
        "nodes unreachable from START: {}; add an edge into each, or, if a node reaches one with `Directive::goto`, make it a dynamic target: `dynamic {{ .. }}` in graph!, `WarGraph::mark_dynamic_target` on a builder",
        ids(nodes)
    )]
    UnreachableNodes {
        /// Every unreachable node.
        nodes: Vec<NodeId>,
    },
    /// `mark_dynamic_target` named undeclared nodes.
    #[error("dynamic targets that are not declared nodes: {}", ids(nodes))]
    UnknownDynamicTarget {
        /// Every such id.
        nodes: Vec<NodeId>,
    },
    /// Paladin nodes whose template or output names undeclared fields.
    #[error("paladin nodes referencing undeclared fields: {}", list(offenders))]
    PaladinFieldUndeclared {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Paladin nodes whose input does not fit how they run: a worker
    /// template whose prompt reads nothing of its task (every task would send
    /// the same one) and is not marked `InputMapping::task_independent`, a
    /// node that reads `{task.…}` but never runs as a task, or a `task.`
    /// field the worker's declared task fields do not include.
    #[error(
        "paladin nodes whose input does not read their task correctly: {}",
        list(offenders)
    )]
    PaladinTaskInput {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// `declare_muster` entries that do not hold: a mustering node or
    /// worker that is not declared, a worker that is not a worker template,
    /// or the same `(node, worker)` pair declared twice.
    #[error("muster declarations that do not hold: {}", list(offenders))]
    MusterDeclarationInvalid {
        /// Every offender, under the mustering node.
        offenders: Vec<PolicyOffender>,
    },
    /// Paladin nodes whose agent has no model: `Paladin::new(name)` without
    /// `with_model(..)` (or a blank model), which would fail at attempt 1.
    #[error(
        "paladin nodes with no model (set one with `Paladin::with_model`): {}",
        ids(nodes)
    )]
    PaladinWithoutModel {
        /// Every such node, worker templates included.
        nodes: Vec<NodeId>,
    },
    /// `set_aegis` on ids that are not declared nodes.
    #[error("Aegis set on undeclared nodes: {}", ids(nodes))]
    AegisOnUndeclaredNode {
        /// Every such id.
        nodes: Vec<NodeId>,
    },
    /// Retry policies that cannot run as written.
    #[error("invalid retry policies: {}", list(offenders))]
    RetryPolicyInvalid {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Timeout policies with a zero duration.
    #[error("invalid timeout policies: {}", list(offenders))]
    TimeoutPolicyInvalid {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Policies on node kinds that do not support them (see the support matrix).
    #[error("Aegis policies unsupported for their node kind: {}", list(offenders))]
    AegisUnsupportedForNodeKind {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Custom retry predicates no one registered on the engine.
    #[error("retry predicates not registered on the engine: {}", list(offenders))]
    UnregisteredRetryPredicate {
        /// Every offender, naming the missing predicate.
        offenders: Vec<PolicyOffender>,
    },
    /// Conditional edges naming evaluators no one registered on the engine.
    #[error("edge evaluators not registered on the engine: {}", ids(names))]
    UnregisteredEdgeEvaluator {
        /// Every missing evaluator name.
        names: Vec<String>,
    },
    /// Custom error handlers no one registered on the engine.
    #[error("error handlers not registered on the engine: {}", list(offenders))]
    UnregisteredErrorHandler {
        /// Every offender, naming the missing handler.
        offenders: Vec<PolicyOffender>,
    },
    /// Route handlers whose target is not a declared node.
    #[error("route targets that are not declared nodes: {}", list(offenders))]
    RouteTargetUnknown {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Route handlers whose error field is not declared.
    #[error("route error fields that are not declared: {}", list(offenders))]
    RouteErrorFieldUndeclared {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Route handlers whose error field is `Sum` (an error object cannot be summed).
    #[error("route error fields with Sum dispatch: {}", list(offenders))]
    RouteErrorFieldDispatchInvalid {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Absorb deltas writing undeclared fields or values their dispatch cannot take.
    #[error("absorb deltas that do not fit the schema: {}", list(offenders))]
    AbsorbDeltaSchemaInvalid {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Worker templates with edges into them (they run only as musters).
    #[error(
        "worker templates with incoming edges (they run only as mustered tasks): {}",
        ids(nodes)
    )]
    WorkerTemplateHasIncomingEdges {
        /// Every such template.
        nodes: Vec<NodeId>,
    },
    /// Route handlers targeting a worker template.
    #[error("route targets that are worker templates: {}", list(offenders))]
    RouteTargetIsWorkerTemplate {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Route handlers on worker templates (a task may only contribute a delta).
    #[error(
        "handlers not allowed on worker templates (use Absorb or a Custom handler returning Edges): {}",
        list(offenders)
    )]
    HandlerNotAllowedOnWorkerTemplate {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// Battalion field mappings naming undeclared fields.
    #[error(
        "battalion field mappings naming undeclared fields: {}",
        list(offenders)
    )]
    BattalionMappingInvalid {
        /// Every offender.
        offenders: Vec<PolicyOffender>,
    },
    /// A Battalion node's child graph does not validate.
    #[error("the child graph of battalion `{node}` is invalid: {error}")]
    BattalionChildInvalid {
        /// The Battalion node.
        node: NodeId,
        /// The child's validation error.
        error: Box<EngineError>,
    },

    /// The initial input does not fit the schema.
    #[error("invalid input: {0}")]
    InvalidInput(MergeError),
    /// Two writers of one `LastWrite` field in one superstep.
    #[error("conflicting writes to LastWrite field `{field}` by {}", ids(writers))]
    ConflictingWrites {
        /// The field.
        field: FieldName,
        /// Every writer, in vanguard order.
        writers: Vec<Writer>,
    },
    /// A node wrote a field the schema does not declare.
    #[error("node `{node}` wrote undeclared field `{field}`")]
    UndeclaredFieldWrite {
        /// The writer.
        node: Writer,
        /// The field.
        field: FieldName,
    },
    /// A node wrote a value its field's dispatch rule cannot take.
    #[error("node `{node}` wrote {found} to {rule:?} field `{field}`")]
    DispatchTypeMismatch {
        /// The writer.
        node: Writer,
        /// The field.
        field: FieldName,
        /// The field's rule.
        rule: DispatchRule,
        /// What was written.
        found: &'static str,
    },
    /// A node returned `Goto` to a node that is neither a static successor
    /// nor a dynamic target.
    #[error(
        "node `{node}` returned Goto(`{target}`), which is neither a static successor nor a dynamic target: make `{target}` a dynamic target (`dynamic {{ {target} }}` in graph!, `WarGraph::mark_dynamic_target(\"{target}\")` on a builder), or add the edge `{node} -> {target}`"
    )]
    InvalidGoto {
        /// The node.
        node: NodeId,
        /// The refused target.
        target: NodeId,
    },
    /// A conditional edge evaluator chose a target outside its declared set.
    #[error(
        "evaluator `{evaluator}` on `{node}` chose `{target}`, which is not among its declared targets"
    )]
    ConditionalTargetNotDeclared {
        /// The edge's source.
        node: NodeId,
        /// The evaluator.
        evaluator: String,
        /// The refused target.
        target: NodeId,
    },
    /// A conditional edge evaluator failed.
    #[error("evaluator `{evaluator}` on `{node}` failed: {message}")]
    EdgeEvaluatorFailed {
        /// The edge's source.
        node: NodeId,
        /// The evaluator.
        evaluator: String,
        /// Its error.
        message: String,
    },
    /// `max_supersteps` supersteps ran without the run completing.
    #[error("recursion limit of {limit} supersteps exceeded")]
    RecursionLimitExceeded {
        /// The limit.
        limit: u32,
    },
    /// A node was activated more than `max_node_visits` times.
    #[error("node `{node}` exceeded its visit limit of {limit}")]
    NodeVisitLimitExceeded {
        /// The node.
        node: NodeId,
        /// The limit.
        limit: u32,
    },
    /// The run-level budget ran out.
    #[error("run timeout exceeded: {elapsed:?} elapsed, limit {limit:?}")]
    RunTimeoutExceeded {
        /// Time spent in this start/resume call.
        elapsed: Duration,
        /// The limit.
        limit: Duration,
    },
    /// The run's spend budget (tokens or money) ran out: a node needed to
    /// spend more when nothing was left. Like [`EngineError::RunTimeoutExceeded`],
    /// no `on_error` handler runs for it.
    #[error("spend budget exhausted: spent {spent}")]
    SpendBudgetExhausted {
        /// What the `start`/`resume` call spent.
        spent: crate::spend::Spend,
        /// Its budget.
        budget: crate::spend::SpendBudget,
    },
    /// A node failed finally, with no handler to decide otherwise.
    #[error("{0}")]
    NodeFailed(NodeError),

    /// `resume` was given a graph whose fingerprint differs from the
    /// thread's, and the change is not compatible with the waiting thread
    /// (see the README's "Deploying a new version").
    #[error(
        "graph mismatch: the thread was run with graph {expected}, this graph is {found}: {}{}",
        evolution::join(reasons, "; "),
        if changes.is_empty() { String::new() } else { format!(" (changes: {})", evolution::join(changes, ", ")) }
    )]
    GraphMismatch {
        /// The thread's fingerprint.
        expected: String,
        /// This graph's fingerprint.
        found: String,
        /// Why the thread cannot continue on this graph (never empty).
        reasons: Vec<Incompatibility>,
        /// Everything that differs between the two graphs' manifests
        /// (empty when the thread predates manifests).
        changes: Vec<GraphChange>,
    },
    /// `resume` or `fork` named a thread with no waypoints.
    #[error("thread `{thread_id}` has no waypoints")]
    ThreadNotFound {
        /// The thread.
        thread_id: String,
    },
    /// `start` named a thread that already has waypoints.
    #[error("thread `{thread_id}` already exists: resume it or start a new thread")]
    ThreadAlreadyExists {
        /// The thread.
        thread_id: String,
    },
    /// `fork` named a waypoint the thread does not have.
    #[error("thread `{thread_id}` has no waypoint #{seq}")]
    WaypointNotFound {
        /// The thread.
        thread_id: String,
        /// The waypoint sequence number.
        seq: u64,
    },
    /// Another engine advanced the thread first; this one wrote nothing.
    #[error("thread `{thread_id}` was advanced concurrently by another engine")]
    ConcurrentUpdate {
        /// The thread.
        thread_id: String,
    },
    /// `RunOutcome::into_result` of a halted run.
    #[error("thread `{thread_id}` was halted with {} activations pending; resume it", vanguard.len())]
    Halted {
        /// The thread.
        thread_id: String,
        /// The activations `resume` will run.
        vanguard: Vec<NodeId>,
    },
    /// `RunOutcome::into_result` of a run waiting for a human.
    #[error(
        "thread `{thread_id}` is awaiting input from {}; resume it with a ParleyResponse",
        ids(nodes)
    )]
    AwaitingInput {
        /// The thread.
        thread_id: String,
        /// The nodes that parleyed.
        nodes: Vec<NodeId>,
    },
    /// `resume` without a response on a thread that is awaiting one.
    #[error("thread `{thread_id}` is awaiting input: resume it with a ParleyResponse")]
    ParleyResponseRequired {
        /// The thread.
        thread_id: String,
    },
    /// A parley was answered after it expired, and its policy is to fail.
    #[error("the parley of `{node}` expired before it was answered")]
    ParleyExpired {
        /// The node that parleyed.
        node: NodeId,
    },
    /// A Muster named a worker that is not a declared worker template.
    #[error("`{node}` mustered `{worker}`, which is not a worker template")]
    MusterWorkerNotTemplate {
        /// The mustering node.
        node: NodeId,
        /// The named worker.
        worker: NodeId,
    },
    /// A node mustered a worker template it has not declared with
    /// `WarGraph::declare_muster`, in a graph that declares its musters
    /// (a graph that declares none lets any node muster any template).
    #[error(
        "`{node}` mustered `{worker}`, but this graph declares its musters and `{node} -> {worker}` is not one of them: declare it (`musters {{ {node} -> {worker} }}` in graph!, or `WarGraph::declare_muster`)"
    )]
    MusterUndeclared {
        /// The mustering node.
        node: NodeId,
        /// The worker it named.
        worker: NodeId,
    },
    /// A Muster repeated a task key.
    #[error("`{node}` mustered task key `{task_key}` of `{worker}` twice")]
    DuplicateTaskKey {
        /// The mustering node.
        node: NodeId,
        /// The worker.
        worker: NodeId,
        /// The repeated key.
        task_key: String,
    },
    /// A mustered task returned something other than an Edges directive.
    #[error(
        "mustered task `{node}[{task_key}]` returned {returned}; a task contributes a delta only (return Edges)"
    )]
    MusterTaskMustReturnEdges {
        /// The worker.
        node: NodeId,
        /// The task.
        task_key: String,
        /// What it returned.
        returned: String,
    },
    /// A custom error handler of a mustered task returned routing.
    #[error(
        "the error handler of mustered task `{node}[{task_key}]` returned {returned}; on a worker template a handler may only contribute a delta (Edges). Handle it at the aggregator instead"
    )]
    MusterHandlerMustBeDeltaOnly {
        /// The worker.
        node: NodeId,
        /// The task.
        task_key: String,
        /// What the handler returned.
        returned: String,
    },
    /// A parley response was given to a thread that is not awaiting one.
    #[error("thread `{thread_id}` is not awaiting input; resume it without a response")]
    UnexpectedParleyResponse {
        /// The thread.
        thread_id: String,
    },
    /// The waypoint store failed.
    #[error("waypoint store error: {0}")]
    Store(StoreError),
    /// `start`, `resume` or `fork` named a thread id that no store can
    /// hold, or that is reserved for Battalion child threads; nothing ran.
    #[error("{0}")]
    InvalidThreadId(ThreadIdError),
    /// `CacheKeySpec::Fields` naming fields the schema does not declare (a
    /// typo would otherwise silently narrow the key).
    #[error("cache keys naming undeclared fields: {}", list(offenders))]
    CacheKeyFieldUndeclared {
        /// Every offender, naming the field.
        offenders: Vec<PolicyOffender>,
    },
    /// Cache policies on Paladin nodes whose output field is marked
    /// `CacheMarker::Deny`.
    #[error(
        "cache policies on Paladin nodes whose output field is marked CacheMarker::Deny: {}",
        list(offenders)
    )]
    CacheOutputFieldDenied {
        /// Every offender, naming the field.
        offenders: Vec<PolicyOffender>,
    },
    /// The graph has cache policies but the engine has no node cache
    /// (`WarEngine::with_node_cache`).
    #[error(
        "nodes with a cache policy but no cache backend on the engine: {}",
        ids(nodes)
    )]
    CachePolicyWithoutCacheBackend {
        /// Every node whose policy carries a cache.
        nodes: Vec<NodeId>,
    },
    /// The engine's cache namespace (`WarEngine::with_cache_namespace`) is
    /// empty, and the graph caches: an empty tenant id would share the key
    /// space of engines without a namespace.
    #[error(
        "the engine's cache namespace is empty, so the cached nodes {} would share entries with every engine that has none: give a non-empty namespace, or none",
        ids(nodes)
    )]
    EmptyCacheNamespace {
        /// Every node whose policy carries a cache.
        nodes: Vec<NodeId>,
    },
    /// A node-scoped cache policy on a Function node without a code
    /// version ([`StateNode::code_version`](crate::graph::StateNode::code_version)):
    /// its key would hold none of its code, so a fixed node would keep
    /// being served its old answers in every graph that holds it.
    #[error(
        "node-scoped cache policies on Function nodes without a code version: {} (an #[aegis] function has one; give a closure node `FnNode::with_code_version`, a StateNode `code_version`, or keep the graph scope)",
        ids(nodes)
    )]
    CacheScopeWithoutCodeVersion {
        /// Every such node.
        nodes: Vec<NodeId>,
    },
}

impl EngineError {
    /// Every individual validation error inside this one (itself, or the
    /// members of [`EngineError::ValidationFailed`]).
    pub fn validation_errors(&self) -> Vec<&EngineError> {
        match self {
            EngineError::ValidationFailed { errors } => errors.iter().collect(),
            other => vec![other],
        }
    }

    /// The node error, when a node's failure ended the run.
    pub fn node_error(&self) -> Option<&NodeError> {
        match self {
            EngineError::NodeFailed(e) => Some(e),
            _ => None,
        }
    }

    /// Folds a list of validation errors: `Ok` when empty, the error itself
    /// when alone, [`EngineError::ValidationFailed`] otherwise.
    pub(crate) fn from_problems(mut errors: Vec<EngineError>) -> Result<(), EngineError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(EngineError::ValidationFailed { errors }),
        }
    }
}

impl From<MergeError> for EngineError {
    fn from(e: MergeError) -> Self {
        match e {
            MergeError::ConflictingWrites { field, writers } => {
                EngineError::ConflictingWrites { field, writers }
            }
            MergeError::UndeclaredFieldWrite { writer, field } => {
                EngineError::UndeclaredFieldWrite {
                    node: writer,
                    field,
                }
            }
            MergeError::DispatchTypeMismatch {
                writer,
                field,
                rule,
                found,
            } => EngineError::DispatchTypeMismatch {
                node: writer,
                field,
                rule,
                found,
            },
            other => EngineError::InvalidInput(other),
        }
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { thread_id, .. } => EngineError::ConcurrentUpdate { thread_id },
            StoreError::InvalidThreadId(e) => EngineError::InvalidThreadId(e),
            other => EngineError::Store(other),
        }
    }
}

impl From<ThreadIdError> for EngineError {
    fn from(e: ThreadIdError) -> Self {
        EngineError::InvalidThreadId(e)
    }
}
