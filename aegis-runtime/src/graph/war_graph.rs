use std::collections::{BTreeMap, BTreeSet};

use super::{NodeId, NodeSpec};
use crate::aegis::Aegis;
use crate::engine::EngineLimits;
use crate::state::BattlefieldSchema;

/// Conditional edges: after `from`, the evaluator registered on the engine
/// under `evaluator` picks among `targets`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
/// use aegis_runtime::*;
/// use serde_json::json;
///
/// struct Hello;
/// #[async_trait::async_trait]
/// impl StateNode for Hello {
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
    pub(crate) aegis: BTreeMap<NodeId, Aegis>,
    pub(crate) default_aegis: Option<Aegis>,
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
            aegis: BTreeMap::new(),
            default_aegis: None,
        }
    }

    /// Declares a node.
    pub fn add_node(&mut self, id: impl Into<NodeId>, spec: NodeSpec) -> &mut Self {
        self.nodes.push((id.into(), spec));
        self
    }

    /// Declares a worker template: a node only ever run as the tasks of a
    /// `NextStep::Muster`, never scheduled by edges into it. Its static
    /// successors run once all its tasks have merged.
    pub fn add_worker_template(&mut self, id: impl Into<NodeId>, spec: NodeSpec) -> &mut Self {
        let id = id.into();
        self.worker_templates.insert(id.clone());
        self.nodes.push((id, spec));
        self
    }

    /// Whether `id` is a worker template.
    pub fn is_worker_template(&self, id: &NodeId) -> bool {
        self.worker_templates.contains(id)
    }

    /// Adds a static edge; `START` and `END` are the virtual endpoints.
    pub fn add_edge(&mut self, from: impl Into<NodeId>, to: impl Into<NodeId>) -> &mut Self {
        self.edges.push((from.into(), to.into()));
        self
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
        self
    }

    /// Allows any node to `Goto` this one.
    pub fn mark_dynamic_target(&mut self, id: impl Into<NodeId>) -> &mut Self {
        self.dynamic_targets.insert(id.into());
        self
    }

    /// Sets this node's own Aegis, replacing any earlier one.
    pub fn set_aegis(&mut self, id: impl Into<NodeId>, aegis: Aegis) -> &mut Self {
        self.aegis.insert(id.into(), aegis);
        self
    }

    /// Sets the graph-wide Aegis for every node without its own entry.
    pub fn with_default_aegis(&mut self, aegis: Aegis) -> &mut Self {
        self.default_aegis = Some(aegis);
        self
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
        self
    }
}
