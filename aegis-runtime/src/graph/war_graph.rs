//! `WarGraph`: the schema, nodes, edges and Aegis sidecar the engine runs.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{GraphManifest, NodeSpec};
use crate::error::EngineError;
use crate::graph::EngineLimits;
use crate::id::NodeId;
use crate::policy::Aegis;
use crate::state::BattlefieldSchema;

/// Conditional edges: after `from`, the evaluator registered on the engine
/// under `evaluator` picks among `targets`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConditionalEdges {
    /// The source node.
    pub from: NodeId,
    /// The evaluator's registered name.
    pub evaluator: String,
    /// The targets it may choose.
    pub targets: Vec<NodeId>,
}

/// A workflow graph: a schema, nodes, edges, limits and the Aegis sidecar.
///
/// Building never fails; [`WarGraph::validate`] (also run by
/// `WarEngine::start`/`resume`) reports every problem at once.
///
/// ```
/// use aegis_runtime::error::StateNodeError;
/// use aegis_runtime::graph::{Directive, EngineLimits, NodeContext, NodeSpec, StateNode, WarGraph};
/// use aegis_runtime::id::{END, START};
/// use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};
/// use serde_json::json;
///
/// struct Hello;
/// #[async_trait::async_trait]
/// impl StateNode for Hello {
///     fn kind_name(&self) -> &str {
///         "hello"
///     }
///
///     async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
///         let mut delta = StateDelta::new();
///         delta.set("greeting", "hello")?;
///         Ok(delta.into())
///     }
/// }
///
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     FieldName::new("greeting")?, DispatchRule::LastWrite, None, false,
/// )]);
/// let mut graph = WarGraph::new(schema, EngineLimits::default());
/// graph.add_node("hello", NodeSpec::function(Hello));
/// graph.add_edge(START, "hello").add_edge("hello", END);
/// graph.validate()?;
/// assert!(graph.to_mermaid().contains("hello"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct WarGraph {
    pub(crate) schema: BattlefieldSchema,
    pub(crate) limits: EngineLimits,
    pub(crate) nodes: Vec<(NodeId, NodeSpec)>,
    pub(crate) edges: Vec<(NodeId, NodeId)>,
    pub(crate) conditional: Vec<ConditionalEdges>,
    pub(crate) dynamic_targets: BTreeSet<NodeId>,
    pub(crate) worker_templates: BTreeSet<NodeId>,
    /// The payload fields the tasks mustered to a worker template carry,
    /// where declared: validation checks its `task.` placeholders by them.
    pub(crate) task_fields: BTreeMap<NodeId, BTreeSet<String>>,
    /// Declared fan-outs, `(mustering node, worker template)`, in
    /// declaration order (repeats kept, so validation can name them).
    pub(crate) musters: Vec<(NodeId, NodeId)>,
    pub(crate) aegis: BTreeMap<NodeId, Aegis>,
    pub(crate) default_aegis: Option<Aegis>,
    /// State rewrites for threads of earlier graphs; not hashed.
    pub(crate) migrations: Vec<super::migration::Migration>,
    pub(crate) memo: Memo,
}

/// What is derived from the graph, computed on first use and forgotten by
/// every builder method: an engine starting many runs of one graph
/// validates, hashes and indexes it once, not once per `start`/`resume`.
#[derive(Clone, Default)]
pub(crate) struct Memo {
    pub(crate) problems: OnceLock<Vec<EngineError>>,
    pub(crate) fingerprint: OnceLock<Arc<str>>,
    pub(crate) manifest: OnceLock<Arc<GraphManifest>>,
    /// What a layer above derives from the graph to run it (the engine's
    /// lookup index, with each node's successors and cache key seed). Typed
    /// by that layer: this one only keeps it, and forgets it with the rest.
    pub(crate) run_index: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Memo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memo")
            .field("checked", &self.problems.get().is_some())
            .field("fingerprinted", &self.fingerprint.get().is_some())
            .field("manifest", &self.manifest.get().is_some())
            .field("indexed", &self.run_index.get().is_some())
            .finish()
    }
}

impl WarGraph {
    /// An empty graph over `schema`, run under `limits`.
    pub fn new(schema: BattlefieldSchema, limits: EngineLimits) -> Self {
        WarGraph {
            schema,
            limits,
            nodes: Vec::new(),
            edges: Vec::new(),
            conditional: Vec::new(),
            dynamic_targets: BTreeSet::new(),
            worker_templates: BTreeSet::new(),
            task_fields: BTreeMap::new(),
            musters: Vec::new(),
            aegis: BTreeMap::new(),
            default_aegis: None,
            migrations: Vec::new(),
            memo: Memo::default(),
        }
    }

    /// Forgets the memoised checks and fingerprint: every builder method
    /// ends here, so a changed graph is always checked and hashed afresh.
    fn changed(&mut self) -> &mut Self {
        self.memo = Memo::default();
        self
    }

    /// Declares a node.
    pub fn add_node(&mut self, id: impl Into<NodeId>, spec: NodeSpec) -> &mut Self {
        self.nodes.push((id.into(), spec));
        self.changed()
    }

    /// Declares a worker template: a node only ever run as the tasks of a
    /// `NextStep::Muster`, never scheduled by edges into it. Its static
    /// successors run once all its tasks have merged.
    pub fn add_worker_template(&mut self, id: impl Into<NodeId>, spec: NodeSpec) -> &mut Self {
        let id = id.into();
        self.worker_templates.insert(id.clone());
        self.nodes.push((id, spec));
        self.changed()
    }

    /// Declares the payload fields every task mustered to the worker
    /// template `id` carries (its payload is a JSON object with them), so
    /// that validation refuses a `{task.<field>}` placeholder naming any
    /// other. Without it the payload's shape is unknown, and a missing field
    /// fails the task's attempt when it renders.
    pub fn declare_task_fields<I, F>(&mut self, id: impl Into<NodeId>, fields: I) -> &mut Self
    where
        I: IntoIterator<Item = F>,
        F: Into<String>,
    {
        self.task_fields
            .insert(id.into(), fields.into_iter().map(Into::into).collect());
        self.changed()
    }

    /// Declares that the node `from` musters tasks to the worker template
    /// `worker`: a fan-out, drawn by [`WarGraph::to_mermaid`] as a dashed
    /// edge. [`WarGraph::validate`] refuses a declaration naming an
    /// undeclared node, a `worker` that is not a worker template, a `from`
    /// that is one (a task cannot muster), or a pair declared twice.
    ///
    /// Once a graph declares any muster, its declarations are the complete
    /// list: a `NextStep::Muster` from a node to a worker it has not
    /// declared fails the run with `EngineError::MusterUndeclared`. A graph
    /// that declares none lets any node muster any worker template, as
    /// before. Declared musters are part of the graph's fingerprint (a graph
    /// declaring none hashes as it did before they existed); changing them
    /// is a compatible change for `resume`, like changing an edge.
    pub fn declare_muster(
        &mut self,
        from: impl Into<NodeId>,
        worker: impl Into<NodeId>,
    ) -> &mut Self {
        self.musters.push((from.into(), worker.into()));
        self.changed()
    }

    /// Every declared fan-out, `(mustering node, worker template)`, in
    /// declaration order.
    pub fn musters(&self) -> impl Iterator<Item = (&NodeId, &NodeId)> {
        self.musters.iter().map(|(a, b)| (a, b))
    }

    /// Whether `from` may muster `worker`: always when the graph declares
    /// no musters, else only a declared pair. (Whether `worker` is a worker
    /// template is checked separately.)
    pub(crate) fn muster_allowed(&self, from: &NodeId, worker: &NodeId) -> bool {
        self.musters.is_empty() || self.musters.iter().any(|(a, b)| a == from && b == worker)
    }

    /// Whether `id` is a worker template.
    pub fn is_worker_template(&self, id: &NodeId) -> bool {
        self.worker_templates.contains(id)
    }

    /// Adds a static edge; `START` and `END` are the virtual endpoints.
    pub fn add_edge(&mut self, from: impl Into<NodeId>, to: impl Into<NodeId>) -> &mut Self {
        self.edges.push((from.into(), to.into()));
        self.changed()
    }

    /// Adds conditional edges from `from`, chosen among `targets` by the
    /// evaluator registered on the engine as `evaluator`.
    pub fn add_conditional_edges<T: Into<NodeId>>(
        &mut self,
        from: impl Into<NodeId>,
        evaluator: impl Into<String>,
        targets: impl IntoIterator<Item = T>,
    ) -> &mut Self {
        self.conditional.push(ConditionalEdges {
            from: from.into(),
            evaluator: evaluator.into(),
            targets: targets.into_iter().map(Into::into).collect(),
        });
        self.changed()
    }

    /// Allows any node to `Goto` this one.
    pub fn mark_dynamic_target(&mut self, id: impl Into<NodeId>) -> &mut Self {
        self.dynamic_targets.insert(id.into());
        self.changed()
    }

    /// Sets this node's own Aegis, replacing any earlier one.
    pub fn set_aegis(&mut self, id: impl Into<NodeId>, aegis: Aegis) -> &mut Self {
        self.aegis.insert(id.into(), aegis);
        self.changed()
    }

    /// Sets the graph-wide Aegis for every node without its own entry.
    pub fn with_default_aegis(&mut self, aegis: Aegis) -> &mut Self {
        self.default_aegis = Some(aegis);
        self.changed()
    }

    /// The Aegis that governs `id`: its own entry if it has one, else the
    /// default, else none. The two are never merged field by field.
    pub fn aegis_for(&self, id: &NodeId) -> Option<&Aegis> {
        self.aegis.get(id).or(self.default_aegis.as_ref())
    }

    /// The graph-wide default Aegis, if set.
    pub fn default_aegis(&self) -> Option<&Aegis> {
        self.default_aegis.as_ref()
    }

    /// Every Aegis value in the graph, each once: the default (under `None`),
    /// then each node's own entry. Policy checks walk these rather than
    /// `aegis_for` per node, so a bad default is reported once.
    pub(crate) fn aegis_entries(&self) -> impl Iterator<Item = (Option<&NodeId>, &Aegis)> {
        self.default_aegis
            .iter()
            .map(|a| (None, a))
            .chain(self.aegis.iter().map(|(n, a)| (Some(n), a)))
    }

    /// The node declared as `id` (the first, if declared twice).
    pub fn node(&self, id: &str) -> Option<&NodeSpec> {
        self.nodes
            .iter()
            .find(|(n, _)| n.as_str() == id)
            .map(|(_, s)| s)
    }

    /// Every declared node, in declaration order.
    pub fn nodes(&self) -> impl Iterator<Item = (&NodeId, &NodeSpec)> {
        self.nodes.iter().map(|(id, spec)| (id, spec))
    }

    /// Every static edge, in insertion order.
    pub fn edges(&self) -> impl Iterator<Item = (&NodeId, &NodeId)> {
        self.edges.iter().map(|(a, b)| (a, b))
    }

    /// Every set of conditional edges, in insertion order.
    pub fn conditional_edges(&self) -> &[ConditionalEdges] {
        &self.conditional
    }

    /// The state schema.
    pub fn schema(&self) -> &BattlefieldSchema {
        &self.schema
    }

    /// The run limits.
    pub fn limits(&self) -> &EngineLimits {
        &self.limits
    }

    /// Replaces the run limits (limits are tuning, not part of the fingerprint).
    pub fn set_limits(&mut self, limits: EngineLimits) -> &mut Self {
        self.limits = limits;
        self.changed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{END, START};
    use crate::policy::RetryPolicy;
    use crate::state::{DispatchRule, FieldName, FieldSpec};

    fn base() -> WarGraph {
        let field = FieldSpec::new(
            FieldName::new("x").unwrap_or_else(|e| panic!("{e}")),
            DispatchRule::LastWrite,
            None,
            false,
        );
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![field]), EngineLimits::default());
        g.add_node("a", NodeSpec::noop())
            .add_edge(START, "a")
            .add_edge("a", END);
        g
    }

    #[test]
    fn every_builder_method_forgets_the_memoised_checks_and_fingerprint() {
        let bad_retry = Aegis::new().with_retry(RetryPolicy::default().with_max_attempts(0));
        type Change = Box<dyn Fn(&mut WarGraph)>;
        let set_aegis = bad_retry.clone();
        let changes: Vec<(&str, Change)> = vec![
            (
                "add_node",
                Box::new(|g| _ = g.add_node("b", NodeSpec::noop())),
            ),
            (
                "add_worker_template",
                Box::new(|g| _ = g.add_worker_template("a", NodeSpec::noop())),
            ),
            ("add_edge", Box::new(|g| _ = g.add_edge("a", "ghost"))),
            (
                "add_conditional_edges",
                Box::new(|g| _ = g.add_conditional_edges("a", "pick", ["ghost"])),
            ),
            (
                "mark_dynamic_target",
                Box::new(|g| _ = g.mark_dynamic_target("ghost")),
            ),
            (
                "declare_muster",
                Box::new(|g| _ = g.declare_muster("a", "ghost")),
            ),
            (
                "set_aegis",
                Box::new(move |g| _ = g.set_aegis("a", set_aegis.clone())),
            ),
            (
                "with_default_aegis",
                Box::new(move |g| _ = g.with_default_aegis(bad_retry.clone())),
            ),
        ];
        for (name, change) in changes {
            // Checked and hashed before the change, then changed...
            let mut g = base();
            assert_eq!(g.problems(), Vec::new());
            let _ = g.fingerprint();
            change(&mut g);
            // ...equals the same graph never checked before.
            let mut fresh = base();
            change(&mut fresh);
            assert_eq!(g.problems(), fresh.clone().check(), "{name}");
            assert_ne!(g.problems(), Vec::new(), "{name} breaks the graph");
            assert_eq!(g.fingerprint(), fresh.digest(), "{name}");
        }
        let mut g = base();
        let _ = (g.problems(), g.fingerprint(), g.shared_manifest());
        let _ = g.memo.run_index.set(Arc::new(()));
        g.set_limits(EngineLimits::default());
        assert!(g.memo.problems.get().is_none() && g.memo.fingerprint.get().is_none());
        assert!(g.memo.manifest.get().is_none() && g.memo.run_index.get().is_none());
    }
}
