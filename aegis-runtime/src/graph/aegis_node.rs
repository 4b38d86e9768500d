//! `#[aegis]` functions as nodes: the traits the attribute implements, the
//! [`StateNode`] adapters over the function, and [`WarGraph::add_aegis_node`].
//!
//! `#[aegis(...)]` on `async fn book(..)` leaves the function as written and
//! emits a same-named, field-less marker struct `book {}` (it lives in the
//! type namespace, so it never clashes with the function) implementing
//! [`AegisNodeFn`]. The marker is what builders take:
//! `graph.add_aegis_node(book {})`, and what `graph!` names by path.
//!
//! A function whose first argument is a dependency,
//! `async fn answer(deps: &Researcher, state: &Battlefield, ctx: &NodeContext)`,
//! gets a marker implementing [`AegisDepsFn`] instead, and the node is the
//! marker with its instance: `graph.add_aegis_node(answer::with(researcher))`,
//! an [`AegisDepsNode`], or `answer(researcher)` in `graph!`. The node owns
//! the instance and lends it to every run; like the function's module path,
//! the instance is not part of the graph's identity.

use futures::future::BoxFuture;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{Directive, NodeSpec, StateNode, WarGraph};
use crate::error::StateNodeError;
use crate::graph::NodeContext;
use crate::policy::Aegis;
use crate::state::Battlefield;

/// A node function annotated with `#[aegis(...)]`, seen through its marker
/// struct.
///
/// The attribute implements this; implementing it by hand is possible (the
/// example shows what the attribute generates) but rarely useful.
///
/// ```
/// use aegis_runtime::error::StateNodeError;
/// use aegis_runtime::graph::{AegisNodeFn, Directive, EngineLimits, NodeContext, WarGraph};
/// use aegis_runtime::id::{END, NodeId, START};
/// use aegis_runtime::policy::{Aegis, TimeoutPolicy};
/// use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};
/// use futures::future::BoxFuture;
///
/// async fn hello(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
///     let mut delta = StateDelta::new();
///     delta.set("greeting", "hello")?;
///     Ok(delta)
/// }
///
/// // What `#[aegis(timeout(run = "5s"))]` on `hello` emits, in essence.
/// #[allow(non_camel_case_types)]
/// struct hello {}
///
/// impl AegisNodeFn for hello {
///     const ID: &'static str = "hello";
///     const KIND: &'static str = "hello";
///     fn aegis() -> Aegis {
///         Aegis::new().with_timeout(TimeoutPolicy::run(std::time::Duration::from_secs(5)))
///     }
///     fn run<'a>(
///         state: &'a Battlefield,
///         ctx: &'a NodeContext,
///     ) -> BoxFuture<'a, Result<Directive, StateNodeError>> {
///         Box::pin(async move { hello(state, ctx).await.map(Directive::from) })
///     }
/// }
///
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     FieldName::new("greeting")?, DispatchRule::LastWrite, None, false,
/// )]);
/// let mut graph = WarGraph::new(schema, EngineLimits::default());
/// graph.add_aegis_node(hello {});
/// graph.add_edge(START, "hello").add_edge("hello", END);
/// graph.validate()?;
/// assert!(graph.aegis_for(&NodeId::new("hello")).is_some_and(|a| a.timeout.is_some()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an #[aegis] node function",
    label = "not an #[aegis] node",
    note = "put `#[aegis]` (or `#[aegis(...)]`) on an `async fn name(state: &Battlefield, ctx: &NodeContext)` and pass its marker: `graph.add_aegis_node(name {{}})`"
)]
pub trait AegisNodeFn: Send + Sync + 'static {
    /// The node id: the function's name unless the attribute says `id = ".."`.
    const ID: &'static str;

    /// The stable name hashed into the graph fingerprint: the node id (the
    /// function's name or the attribute's `id = ".."`), so moving the
    /// function to another module leaves the fingerprint unchanged.
    const KIND: &'static str;

    /// The version of the function's code that node cache keys cover
    /// ([`StateNode::code_version`]): the attribute sets the digest of the
    /// function's tokens (signature and body, without doc comments; comments
    /// and formatting are not tokens), so editing the function leaves its
    /// cached answers behind. `None` for a hand-written impl that sets none.
    const CODE_VERSION: Option<&'static str> = None;

    /// The node's own Aegis as the attribute declares it; empty for a bare
    /// `#[aegis]`.
    fn aegis() -> Aegis;

    /// Runs the function once, converting its `Result<StateDelta | Directive, E>`.
    fn run<'a>(
        state: &'a Battlefield,
        ctx: &'a NodeContext,
    ) -> BoxFuture<'a, Result<Directive, StateNodeError>>;

    /// The function as a `NodeSpec::Function`.
    fn node_spec() -> NodeSpec
    where
        Self: Sized,
    {
        NodeSpec::Function(Arc::new(AegisFnNode::<Self>::new()))
    }
}

/// An `#[aegis]` function whose first argument is a dependency, seen
/// through its marker struct: `async fn name(deps: &T, state: &Battlefield,
/// ctx: &NodeContext)`.
///
/// The attribute implements this, and gives the marker
/// `name::with(instance) -> AegisDepsNode<name>`: the node that owns the
/// instance (see [`AegisDepsNode`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an #[aegis] node function that takes a dependency",
    label = "not an #[aegis] function with a dependency",
    note = "put `#[aegis]` on an `async fn name(deps: &MyClient, state: &Battlefield, ctx: &NodeContext)`, and add it with its instance: `graph.add_aegis_node(name::with(client))`"
)]
pub trait AegisDepsFn: Send + Sync + 'static {
    /// The dependency: the function's first argument is `&Deps`.
    type Deps: ?Sized + Send + Sync + 'static;

    /// The node id: the function's name unless the attribute says `id = ".."`.
    const ID: &'static str;

    /// The stable name hashed into the graph fingerprint: the node id, as
    /// for [`AegisNodeFn::KIND`]. The dependency's data is not hashed: two
    /// graphs whose nodes hold different instances have one fingerprint.
    const KIND: &'static str;

    /// The version of the function's code that node cache keys cover, as
    /// for [`AegisNodeFn::CODE_VERSION`]. The instance is not part of it:
    /// keep two instances' answers apart with a cache namespace
    /// (`WarEngine::with_cache_namespace`).
    const CODE_VERSION: Option<&'static str> = None;

    /// The node's own Aegis as the attribute declares it; empty for a bare
    /// `#[aegis]`.
    fn aegis() -> Aegis;

    /// Runs the function once with `deps`, converting its
    /// `Result<StateDelta | Directive, E>`.
    fn run<'a>(
        deps: &'a Self::Deps,
        state: &'a Battlefield,
        ctx: &'a NodeContext,
    ) -> BoxFuture<'a, Result<Directive, StateNodeError>>;
}

/// An `#[aegis]` function that takes a dependency, with its instance: the
/// [`StateNode`] that runs it, lending it the instance on every attempt.
///
/// Built by the attribute's `name::with(instance)` (or
/// `AegisDepsNode::<name>::new(instance)`), which takes the instance or an
/// `Arc` of it: a shared client stays shared. Cloning the node shares the
/// instance.
///
/// ```
/// use aegis_runtime::error::StateNodeError;
/// use aegis_runtime::graph::{AegisDepsFn, AegisDepsNode, Directive, EngineLimits, NodeContext, WarGraph};
/// use aegis_runtime::id::{END, START};
/// use aegis_runtime::policy::Aegis;
/// use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};
/// use futures::future::BoxFuture;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// struct Counter(AtomicU32);
///
/// async fn count(
///     counter: &Counter,
///     _: &Battlefield,
///     _: &NodeContext,
/// ) -> Result<StateDelta, StateNodeError> {
///     let mut delta = StateDelta::new();
///     delta.set("n", counter.0.fetch_add(1, Ordering::SeqCst) + 1)?;
///     Ok(delta)
/// }
///
/// // What `#[aegis]` on `count` emits, in essence.
/// #[allow(non_camel_case_types)]
/// struct count {}
///
/// impl AegisDepsFn for count {
///     type Deps = Counter;
///     const ID: &'static str = "count";
///     const KIND: &'static str = "count";
///     fn aegis() -> Aegis {
///         Aegis::default()
///     }
///     fn run<'a>(
///         counter: &'a Counter,
///         state: &'a Battlefield,
///         ctx: &'a NodeContext,
///     ) -> BoxFuture<'a, Result<Directive, StateNodeError>> {
///         Box::pin(async move { count(counter, state, ctx).await.map(Directive::from) })
///     }
/// }
///
/// let counter = std::sync::Arc::new(Counter(AtomicU32::new(0)));
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     FieldName::new("n")?, DispatchRule::LastWrite, None, false,
/// )]);
/// let mut graph = WarGraph::new(schema, EngineLimits::default());
/// graph.add_aegis_node(AegisDepsNode::<count>::new(counter.clone()));
/// graph.add_edge(START, "count").add_edge("count", END);
/// graph.validate()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AegisDepsNode<N: AegisDepsFn> {
    deps: Arc<N::Deps>,
}

impl<N: AegisDepsFn> AegisDepsNode<N> {
    /// The node holding `deps`: an instance, or an `Arc` the caller keeps
    /// sharing.
    pub fn new(deps: impl Into<Arc<N::Deps>>) -> Self {
        AegisDepsNode { deps: deps.into() }
    }

    /// The instance the node lends its function.
    pub fn deps(&self) -> &N::Deps {
        &self.deps
    }
}

impl<N: AegisDepsFn> Clone for AegisDepsNode<N> {
    fn clone(&self) -> Self {
        AegisDepsNode {
            deps: Arc::clone(&self.deps),
        }
    }
}

impl<N: AegisDepsFn> fmt::Debug for AegisDepsNode<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The dependency need not be `Debug`, and may hold secrets.
        f.debug_struct("AegisDepsNode")
            .field("kind", &N::KIND)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl<N: AegisDepsFn> StateNode for AegisDepsNode<N> {
    async fn run(
        &self,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        N::run(&self.deps, state, ctx).await
    }

    fn kind_name(&self) -> &str {
        N::KIND
    }

    fn code_version(&self) -> Option<&str> {
        N::CODE_VERSION
    }
}

/// What [`WarGraph::add_aegis_node`] takes: an [`AegisNodeFn`]'s marker
/// (`book {}`), or an [`AegisDepsFn`]'s node with its instance
/// (`answer::with(client)`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an #[aegis] node",
    label = "not an #[aegis] node",
    note = "put `#[aegis]` (or `#[aegis(...)]`) on an `async fn name(state: &Battlefield, ctx: &NodeContext)` and pass its marker: `graph.add_aegis_node(name {{}})`; a function that takes a dependency first, `async fn name(deps: &MyClient, state: &Battlefield, ctx: &NodeContext)`, is added with its instance: `graph.add_aegis_node(name::with(client))`"
)]
pub trait AegisNode: Send + Sync + 'static {
    /// The node id.
    fn node_id(&self) -> &'static str;

    /// The node's own Aegis, as its attribute declares it.
    fn node_aegis(&self) -> Aegis;

    /// The node as a `NodeSpec::Function`.
    fn into_node_spec(self) -> NodeSpec;
}

#[diagnostic::do_not_recommend]
impl<N: AegisNodeFn> AegisNode for N {
    fn node_id(&self) -> &'static str {
        N::ID
    }

    fn node_aegis(&self) -> Aegis {
        N::aegis()
    }

    fn into_node_spec(self) -> NodeSpec {
        N::node_spec()
    }
}

impl<N: AegisDepsFn> AegisNode for AegisDepsNode<N> {
    fn node_id(&self) -> &'static str {
        N::ID
    }

    fn node_aegis(&self) -> Aegis {
        N::aegis()
    }

    fn into_node_spec(self) -> NodeSpec {
        NodeSpec::Function(Arc::new(self))
    }
}

/// The [`StateNode`] that runs an [`AegisNodeFn`]'s function.
pub struct AegisFnNode<N>(PhantomData<fn() -> N>);

impl<N: AegisNodeFn> AegisFnNode<N> {
    /// The adapter for `N`.
    pub fn new() -> Self {
        AegisFnNode(PhantomData)
    }
}

impl<N: AegisNodeFn> Default for AegisFnNode<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: AegisNodeFn> fmt::Debug for AegisFnNode<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AegisFnNode").field(&N::KIND).finish()
    }
}

#[async_trait::async_trait]
impl<N: AegisNodeFn> StateNode for AegisFnNode<N> {
    async fn run(
        &self,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        N::run(state, ctx).await
    }

    fn kind_name(&self) -> &str {
        N::KIND
    }

    fn code_version(&self) -> Option<&str> {
        N::CODE_VERSION
    }
}

impl WarGraph {
    /// Declares the `#[aegis]` function `node` under its id, and attaches
    /// its Aegis (a bare `#[aegis]` attaches none, so the graph's default
    /// still applies to it).
    ///
    /// For a plain function, `node` is the marker, the function's name as a
    /// struct: for `#[aegis(...)] async fn book(..)`, write
    /// `graph.add_aegis_node(book {})` (see [`AegisNodeFn`]). For a function
    /// taking a dependency first, `node` is the marker with its instance:
    /// `graph.add_aegis_node(answer::with(client))` (see [`AegisDepsNode`]).
    pub fn add_aegis_node<N: AegisNode>(&mut self, node: N) -> &mut Self {
        let id = node.node_id();
        let aegis = node.node_aegis();
        self.add_node(id, node.into_node_spec());
        if !aegis.is_empty() {
            self.set_aegis(id, aegis);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{EngineLimits, NextStep};
    use crate::id::{END, NodeId, START};
    use crate::policy::{RetryPolicy, TimeoutPolicy};
    use crate::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};
    use std::time::Duration;

    async fn double(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, &'static str> {
        let n = state
            .get("n")
            .and_then(serde_json::Value::as_i64)
            .ok_or("n is not set")?;
        let mut delta = StateDelta::new();
        delta.set("n", n * 2).map_err(|_| "unwritable")?;
        Ok(delta)
    }

    #[allow(non_camel_case_types)]
    struct double {}

    impl AegisNodeFn for double {
        const ID: &'static str = "double";
        const KIND: &'static str = "double";
        const CODE_VERSION: Option<&'static str> = Some("d0ub1e");
        fn aegis() -> Aegis {
            Aegis::new().with_retry(RetryPolicy::default())
        }
        fn run<'a>(
            state: &'a Battlefield,
            ctx: &'a NodeContext,
        ) -> BoxFuture<'a, Result<Directive, StateNodeError>> {
            Box::pin(async move {
                double(state, ctx)
                    .await
                    .map(Directive::edges)
                    .map_err(StateNodeError::from)
            })
        }
    }

    #[allow(non_camel_case_types)]
    struct plain {}

    impl AegisNodeFn for plain {
        const ID: &'static str = "plain";
        const KIND: &'static str = "tests::plain";
        fn aegis() -> Aegis {
            Aegis::default()
        }
        fn run<'a>(
            _: &'a Battlefield,
            _: &'a NodeContext,
        ) -> BoxFuture<'a, Result<Directive, StateNodeError>> {
            Box::pin(async { Ok(Directive::end(StateDelta::new())) })
        }
    }

    fn schema() -> BattlefieldSchema {
        BattlefieldSchema::new(vec![FieldSpec::new(
            FieldName::new("n").unwrap(),
            DispatchRule::LastWrite,
            None,
            false,
        )])
    }

    #[tokio::test]
    async fn the_adapter_converts_deltas_and_errors() {
        let node = AegisFnNode::<double>::new();
        let ctx = NodeContext::detached("double");
        let state = crate::state::initial_state(&schema(), &serde_json::json!({"n": 21})).unwrap();
        let directive = node.run(&state, &ctx).await.unwrap();
        assert_eq!(directive.next, NextStep::Edges);
        assert_eq!(directive.delta.get("n"), Some(&serde_json::json!(42)));

        let empty = crate::state::initial_state(&schema(), &serde_json::json!({})).unwrap();
        let err = node.run(&empty, &ctx).await.unwrap_err();
        assert_eq!(err, StateNodeError::new("n is not set"));
        assert_eq!(node.kind_name(), "double");
        // The code version the attribute sets, and none by default.
        assert_eq!(node.code_version(), Some("d0ub1e"));
        assert_eq!(AegisFnNode::<plain>::new().code_version(), None);
    }

    #[test]
    fn add_aegis_node_declares_the_node_and_its_aegis() {
        let mut graph = WarGraph::new(schema(), EngineLimits::default());
        graph.add_aegis_node(double {}).add_aegis_node(plain {});
        graph
            .add_edge(START, "double")
            .add_edge("double", "plain")
            .add_edge("plain", END);
        graph.validate().unwrap();
        assert!(
            matches!(graph.node("double"), Some(NodeSpec::Function(n)) if n.kind_name() == "double")
        );
        assert_eq!(
            graph.aegis_for(&NodeId::new("double")),
            Some(&double::aegis())
        );
        // A bare #[aegis] attaches nothing: the default still governs it.
        let default = Aegis::new().with_timeout(TimeoutPolicy::run(Duration::from_secs(1)));
        graph.with_default_aegis(default.clone());
        assert_eq!(graph.aegis_for(&NodeId::new("plain")), Some(&default));
    }
}
