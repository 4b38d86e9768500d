//! What a node is: the `StateNode` trait, its `Directive`, and `NodeSpec`.

use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::{InputMapping, ParleyExpiry, ParleyRequest, WarGraph};
use crate::error::StateNodeError;
use crate::graph::NodeContext;
use crate::graph::Paladin;
use crate::id::NodeId;
use crate::state::{Battlefield, FieldName, StateDelta};
use std::time::Duration;

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
    /// Suspend the run for human input. The superstep's other activations
    /// merge; this node's delta is discarded and the node is re-run, as a
    /// fresh attempt 1, with `NodeContext::parley_response` set on resume.
    /// Boxed: a rare step, and every directive (of every activation) is
    /// moved through several futures, so the common ones stay small.
    Parley(Box<ParleyRequest>),
    /// Fan out: run `worker` (a worker template) once per `(task_key,
    /// payload)` in the next superstep; their deltas merge in task order,
    /// then the template's static successors run.
    Muster {
        /// The worker template.
        worker: NodeId,
        /// One `(task_key, payload)` per task; keys must be unique.
        tasks: Vec<(String, Value)>,
    },
}

impl NextStep {
    /// The variant's name, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            NextStep::Edges => "Edges",
            NextStep::Goto(_) => "Goto",
            NextStep::End => "End",
            NextStep::Parley(_) => "Parley",
            NextStep::Muster { .. } => "Muster",
        }
    }
}

/// What a node returns: the writes it makes and where the run goes next.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Directive {
    /// The node's writes, merged at the superstep barrier.
    pub delta: StateDelta,
    /// The routing decision.
    pub next: NextStep,
}

impl Directive {
    /// A directive writing `delta` and going where `next` says (the
    /// constructors below name the common cases).
    pub fn new(delta: StateDelta, next: NextStep) -> Self {
        Directive { delta, next }
    }

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

    /// A directive that suspends the run for human input.
    pub fn parley(request: ParleyRequest) -> Self {
        Directive {
            delta: StateDelta::new(),
            next: NextStep::Parley(Box::new(request)),
        }
    }

    /// A directive that fans out one task per `(key, payload)` to `worker`.
    pub fn muster(
        delta: StateDelta,
        worker: impl Into<NodeId>,
        tasks: impl IntoIterator<Item = (String, Value)>,
    ) -> Self {
        Directive {
            delta,
            next: NextStep::Muster {
                worker: worker.into(),
                tasks: tasks.into_iter().collect(),
            },
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

    /// A stable name for the node's implementation, chosen by its author and
    /// hashed into the graph fingerprint (and stored with a thread, so a
    /// resume can tell that a waiting node is still the same kind).
    ///
    /// Keep it unchanged while the node does the same job, wherever its code
    /// lives; change it when the node's meaning changes. There is
    /// deliberately no default: a Rust type path changes when code moves and
    /// is not promised stable across compiler versions, and either would
    /// strand every stored thread.
    fn kind_name(&self) -> &str;

    /// The version of the node's code, which node cache keys cover (never
    /// the graph fingerprint, so a code change never blocks a `resume`):
    /// change it whenever the node's result for the same input changes, and
    /// its cached answers are left behind, in every cache scope.
    ///
    /// `#[aegis]` functions return the digest of the function's tokens,
    /// computed at compile time; [`FnNode::with_code_version`] gives a
    /// closure node one. `None` (the default) keys a graph-scoped node by
    /// the graph fingerprint alone, as the guide does, and makes a
    /// node-scoped cache policy a validation error
    /// (`CacheScopeWithoutCodeVersion`).
    ///
    /// ```
    /// use aegis_runtime::error::StateNodeError;
    /// use aegis_runtime::graph::{Directive, NodeContext, StateNode};
    /// use aegis_runtime::async_trait;
    /// use aegis_runtime::state::{Battlefield, StateDelta};
    ///
    /// struct Summarise;
    ///
    /// #[async_trait]
    /// impl StateNode for Summarise {
    ///     async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    ///         Ok(StateDelta::new().into())
    ///     }
    ///     fn kind_name(&self) -> &str {
    ///         "summarise"
    ///     }
    ///     // Bumped with every change to what `run` returns.
    ///     fn code_version(&self) -> Option<&str> {
    ///         Some("2")
    ///     }
    /// }
    /// assert_eq!(Summarise.code_version(), Some("2"));
    /// ```
    fn code_version(&self) -> Option<&str> {
        None
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
    /// A child graph run as one node, in its own thread
    /// `{parent_thread}>{node_id}` (see
    /// [`battalion_thread_id`](crate::id::battalion_thread_id)).
    Battalion {
        /// The child graph.
        child: Arc<WarGraph>,
        /// `(parent field, child field)`: the child's input.
        inputs: Vec<(FieldName, FieldName)>,
        /// `(child field, parent field)`: the node's delta from the child's
        /// final state.
        outputs: Vec<(FieldName, FieldName)>,
    },
    /// A human approval point: it parleys, then routes to `approve` or
    /// `reject` by the answer (`ParleyResponse::is_approval`).
    Gate {
        /// What to ask.
        prompt: String,
        /// How long the question stays open.
        expires_after: Option<Duration>,
        /// What an expired question does.
        on_expire: ParleyExpiry,
        /// Where an approval goes.
        approve: NodeId,
        /// Where anything else goes.
        reject: NodeId,
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

    /// A Battalion node running `child` with the given field mappings
    /// (`inputs`: parent → child, `outputs`: child → parent).
    pub fn battalion(
        child: WarGraph,
        inputs: Vec<(FieldName, FieldName)>,
        outputs: Vec<(FieldName, FieldName)>,
    ) -> Self {
        NodeSpec::Battalion {
            child: Arc::new(child),
            inputs,
            outputs,
        }
    }

    /// A Gate node that never expires.
    pub fn gate(
        prompt: impl Into<String>,
        approve: impl Into<NodeId>,
        reject: impl Into<NodeId>,
    ) -> Self {
        NodeSpec::Gate {
            prompt: prompt.into(),
            expires_after: None,
            on_expire: ParleyExpiry::Fail,
            approve: approve.into(),
            reject: reject.into(),
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
            NodeSpec::Battalion { .. } => NodeKind::Battalion,
            NodeSpec::Gate { .. } => NodeKind::Gate,
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
            NodeSpec::Battalion {
                child,
                inputs,
                outputs,
            } => f
                .debug_struct("Battalion")
                .field("child", &child.fingerprint())
                .field("inputs", inputs)
                .field("outputs", outputs)
                .finish(),
            NodeSpec::Gate {
                prompt,
                expires_after,
                on_expire,
                approve,
                reject,
            } => f
                .debug_struct("Gate")
                .field("prompt", prompt)
                .field("expires_after", expires_after)
                .field("on_expire", on_expire)
                .field("approve", approve)
                .field("reject", reject)
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
    /// `NodeSpec::Battalion`.
    Battalion,
    /// `NodeSpec::Gate`.
    Gate,
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeKind::Function => "Function",
            NodeKind::Paladin => "Paladin",
            NodeKind::Battalion => "Battalion",
            NodeKind::Gate => "Gate",
        })
    }
}

/// The boxed future a closure node returns.
pub type NodeFuture<'a> = futures::future::BoxFuture<'a, Result<Directive, StateNodeError>>;

/// A closure as a Function node, for nodes too small to deserve a type:
///
/// ```
/// use aegis_runtime::graph::NodeSpec;
/// use aegis_runtime::state::StateDelta;
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
    code_version: Option<Box<str>>,
}

impl<F> FnNode<F>
where
    F: for<'a> Fn(&'a Battlefield, &'a NodeContext) -> NodeFuture<'a> + Send + Sync + 'static,
{
    /// Wraps `f`; `name` is hashed into the graph fingerprint in place of a
    /// type name, so name different closures differently.
    pub fn new(name: &'static str, f: F) -> Self {
        FnNode {
            f,
            name,
            code_version: None,
        }
    }

    /// Gives the closure's code a version ([`StateNode::code_version`]):
    /// node cache keys cover it, so bump it whenever the closure's result
    /// for the same input changes and its cached answers are left behind.
    /// A node-scoped cache policy needs one.
    ///
    /// ```
    /// use aegis_runtime::graph::{FnNode, NodeSpec, StateNode};
    /// use aegis_runtime::state::StateDelta;
    ///
    /// let node = FnNode::new("double", |state, _ctx| {
    ///     Box::pin(async move {
    ///         let n = state.get("n").and_then(|v| v.as_i64()).unwrap_or(0);
    ///         let mut delta = StateDelta::new();
    ///         delta.set("n", n * 2)?;
    ///         Ok(delta.into())
    ///     })
    /// })
    /// .with_code_version("2");
    /// assert_eq!(node.code_version(), Some("2"));
    /// let spec = NodeSpec::function(node);
    /// # let _ = spec;
    /// ```
    pub fn with_code_version(mut self, version: impl Into<String>) -> Self {
        self.code_version = Some(version.into().into_boxed_str());
        self
    }
}

#[async_trait]
impl<F> StateNode for FnNode<F>
where
    F: for<'a> Fn(&'a Battlefield, &'a NodeContext) -> NodeFuture<'a> + Send + Sync + 'static,
{
    // Written out rather than `async fn`: the closure's future is boxed
    // already, and `async_trait` would box it once more per attempt.
    fn run<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        state: &'life1 Battlefield,
        ctx: &'life2 NodeContext,
    ) -> NodeFuture<'async_trait>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        (self.f)(state, ctx)
    }

    fn kind_name(&self) -> &str {
        self.name
    }

    fn code_version(&self) -> Option<&str> {
        self.code_version.as_deref()
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

    /// A Function node that changes nothing and takes its edges: the
    /// crate's unit tests build their graphs of it.
    #[cfg(test)]
    pub(crate) fn noop() -> Self {
        NodeSpec::from_fn("noop", |_, _| {
            Box::pin(async { Ok(Directive::edges(StateDelta::new())) })
        })
    }
}
