//! What a node is: the `StateNode` trait, its `Directive`, and `NodeSpec`.

use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::{InputMapping, NodeId};
use crate::engine::NodeContext;
use crate::error::StateNodeError;
use crate::paladin::Paladin;
use crate::state::{Battlefield, FieldName, StateDelta};

/// Where the run goes after a node.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum NextStep {
    /// Follow the node's static and conditional edges.
    Edges,
    /// Run this node next instead; it must be a static successor or a
    /// `mark_dynamic_target`-ed node.
    Goto(NodeId),
    /// This branch contributes no successors.
    End,
}

/// What a node returns: the writes it makes and where the run goes next.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Directive {
    /// The node's writes, merged at the superstep barrier.
    pub delta: StateDelta,
    /// The routing decision.
    pub next: NextStep,
}

impl Directive {
    /// A directive that follows the edges.
    pub fn edges(delta: StateDelta) -> Self {
        Directive {
            delta,
            next: NextStep::Edges,
        }
    }

    /// A directive that jumps to `target`.
    pub fn goto(delta: StateDelta, target: impl Into<NodeId>) -> Self {
        Directive {
            delta,
            next: NextStep::Goto(target.into()),
        }
    }

    /// A directive that ends this branch.
    pub fn end(delta: StateDelta) -> Self {
        Directive {
            delta,
            next: NextStep::End,
        }
    }
}

impl From<StateDelta> for Directive {
    fn from(delta: StateDelta) -> Self {
        Directive::edges(delta)
    }
}

/// A node implemented in Rust.
///
/// `run` reads an immutable snapshot and returns its writes; it never mutates
/// state, so a failed or timed-out attempt leaves nothing behind. A panic
/// inside `run` is caught and becomes a failed attempt of `Unknown` transience.
#[async_trait]
pub trait StateNode: Send + Sync + 'static {
    /// Runs one attempt of the node.
    async fn run(
        &self,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError>;

    /// A stable name for the node's implementation, hashed into the graph
    /// fingerprint (by default the Rust type name).
    fn kind_name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// What a node is. `NodeSpec::Function` wraps a [`StateNode`];
/// `NodeSpec::Paladin` runs an LLM agent through the engine's `PaladinPort`.
#[derive(Clone)]
#[non_exhaustive]
pub enum NodeSpec {
    /// A Rust node.
    Function(Arc<dyn StateNode>),
    /// An LLM agent whose rendered input prompt is sent to the `PaladinPort`
    /// and whose output is written to `output_field`.
    Paladin {
        /// The agent's configuration.
        paladin: Paladin,
        /// The input template, rendered from the snapshot.
        input: InputMapping,
        /// Where the agent's output goes.
        output_field: FieldName,
        /// When set, the output must be JSON of this shape, and is stored parsed.
        output_schema: Option<Value>,
    },
}

impl NodeSpec {
    /// A Function node.
    pub fn function(node: impl StateNode) -> Self {
        NodeSpec::Function(Arc::new(node))
    }

    /// A Paladin node writing its output, as a string, to `output_field`.
    pub fn paladin(paladin: Paladin, input: InputMapping, output_field: FieldName) -> Self {
        NodeSpec::Paladin {
            paladin,
            input,
            output_field,
            output_schema: None,
        }
    }

    /// Sets the output schema of a Paladin node (no effect on other kinds).
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        if let NodeSpec::Paladin { output_schema, .. } = &mut self {
            *output_schema = Some(schema);
        }
        self
    }

    /// The kind's name, as validation messages and renderings show it.
    pub fn kind(&self) -> NodeKind {
        match self {
            NodeSpec::Function(_) => NodeKind::Function,
            NodeSpec::Paladin { .. } => NodeKind::Paladin,
        }
    }
}

impl fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSpec::Function(n) => f.debug_tuple("Function").field(&n.kind_name()).finish(),
            NodeSpec::Paladin {
                paladin,
                input,
                output_field,
                output_schema,
            } => f
                .debug_struct("Paladin")
                .field("paladin", paladin)
                .field("input", input)
                .field("output_field", output_field)
                .field("output_schema", output_schema)
                .finish(),
        }
    }
}

/// The kinds of node, for the support matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// `NodeSpec::Function`.
    Function,
    /// `NodeSpec::Paladin`.
    Paladin,
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeKind::Function => "Function",
            NodeKind::Paladin => "Paladin",
        })
    }
}

/// The boxed future a closure node returns.
pub type NodeFuture<'a> = futures::future::BoxFuture<'a, Result<Directive, StateNodeError>>;

/// A closure as a Function node, for nodes too small to deserve a type:
///
/// ```
/// use aegis_runtime::*;
/// let spec = NodeSpec::from_fn("double", |state, _ctx| {
///     Box::pin(async move {
///         let n = state.get("n").and_then(|v| v.as_i64()).unwrap_or(0);
///         let mut delta = StateDelta::new();
///         delta.set("n", n * 2)?;
///         Ok(delta.into())
///     })
/// });
/// # let _ = spec;
/// ```
pub struct FnNode<F> {
    f: F,
    name: &'static str,
}

impl<F> FnNode<F>
where
    F: for<'a> Fn(&'a Battlefield, &'a NodeContext) -> NodeFuture<'a> + Send + Sync + 'static,
{
    /// Wraps `f`; `name` is hashed into the graph fingerprint in place of a
    /// type name, so name different closures differently.
    pub fn new(name: &'static str, f: F) -> Self {
        FnNode { f, name }
    }
}

#[async_trait]
impl<F> StateNode for FnNode<F>
where
    F: for<'a> Fn(&'a Battlefield, &'a NodeContext) -> NodeFuture<'a> + Send + Sync + 'static,
{
    async fn run(
        &self,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        (self.f)(state, ctx).await
    }

    fn kind_name(&self) -> &str {
        self.name
    }
}

impl NodeSpec {
    /// A Function node from a closure returning a boxed future (see [`FnNode`]).
    pub fn from_fn<F>(name: &'static str, f: F) -> Self
    where
        F: for<'a> Fn(&'a Battlefield, &'a NodeContext) -> NodeFuture<'a> + Send + Sync + 'static,
    {
        NodeSpec::Function(Arc::new(FnNode::new(name, f)))
    }
}
