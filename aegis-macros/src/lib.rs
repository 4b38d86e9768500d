//! Procedural macros for `aegis`: [`macro@aegis`] and [`graph!`].
//! Use them through the facade: `use aegis::prelude::*;`.
//!
//! # Design
//!
//! Both macros follow serde_derive: parse, then validate with every error
//! kept with its span and reported together, then expand. Generated code
//! names the runtime only through `::aegis::__private` (or the path given by
//! `crate = ".."`), so the user's own `Result`, `Aegis`, `graph` or `state`
//! never changes its meaning.
//!
//! # The policy grammar
//!
//! `#[aegis(..)]`, `graph!`'s `default_aegis { .. }` and its per-node
//! `#[aegis(..)]` overrides share one grammar, mirroring the runtime types.
//! Every key is optional and given at most once, in any order; the items
//! are `,`-separated. An empty `#[aegis]` is a node with no Aegis of its
//! own.
//!
//! | key | runtime value | notes |
//! |---|---|---|
//! | `retry(max = 5, initial = "500ms", factor = 2.0, max_interval = "60s", jitter = false, on = transient, respect_retry_after = true, max_retry_after = "60s")` | `RetryPolicy` | unset keys take `RetryPolicy::default()`; a bare `retry` is the default policy; `max` counts attempts including the first (at least 1); `factor` is a number of at least 1 (`2` or `2.0`); `on` is `transient`, `unknown`, `all`, `never` or a registered predicate's name in quotes; `max_retry_after` needs `respect_retry_after = true` |
//! | `timeout(run = "120s", idle = "10s", first_chunk = "5s")` | `TimeoutPolicy` | at least one of the three; `first_chunk` bounds each provider's wait for a streamed completion's first chunk, and must be shorter than `run` |
//! | `on_error(route = cancel)` | `ErrorHandlerSpec::Route` | the error field defaults to `<node id>_error`; set it with `on_error(route = cancel, error_field = booking_error)` |
//! | `on_error(absorb(summary = "unavailable", retries_left = 0))` | `ErrorHandlerSpec::Absorb` | values are JSON literals: strings, numbers, `true`/`false`, `null`, `[..]`, `{ "key": value }`; a bare `absorb` writes nothing |
//! | `on_error(custom = "escalate")` | `ErrorHandlerSpec::Custom` | the name registered with `WarEngine::with_error_handler` |
//! | `cache(ttl = "15m", key = fields(question, locale), scope = node, fallback_results = true)` | `CachePolicy` | `ttl` is required; `key = default` (the default) or `fields(..)`; `scope = graph` (the default) or `node` (`CacheScope`: a key that survives edits to the rest of the graph); `fallback_results` (off by default) also stores a result a fallback provider served |
//! | `id = "booker"` | the node id | attribute only; defaults to the function's name |
//! | `crate = "::aegis"` | — | attribute only (in `graph!`, a top-level `crate = "..";`) |
//!
//! `on_error` takes one handler: `route` (with or without `error_field`),
//! `absorb` or `custom`. A boolean key written bare (`jitter`,
//! `respect_retry_after`, `fallback_results`) means `= true`.
//!
//! Durations are string literals of integer amounts and units `ms`, `s`, `m`,
//! `h`, largest first: `"500ms"`, `"10s"`, `"15m"`, `"1h"`, `"1m30s"`. They
//! become `Duration::from_millis(..)` constants at compile time. A zero
//! `run`, `idle`, `first_chunk`, `ttl` or `max_retry_after` is an error; a
//! zero `initial` (or `max_interval`) is allowed and means immediate
//! retries, as in the runtime.
//!
//! # Compile-time checks
//!
//! What the runtime's validation would reject and the tokens already show
//! is a compile error on the offending token, saying what to write
//! instead: `max = 0`; a zero, negative, fractional or malformed duration; a
//! `factor` below 1.0 or not a number; `initial` above `max_interval`;
//! `max_retry_after` without `respect_retry_after = true`; a `timeout()`
//! with no bound, or a `first_chunk` not shorter than `run`; unknown keys
//! (with "did you mean"); a key given twice; `error_field` without `route`;
//! two handler shapes; `cache` without `ttl`; an empty custom name; a
//! function that is not `async`, is a method, is generic, or takes other
//! arguments. `graph!` adds the cross-references: undeclared nodes in edges
//! and routes (suggesting the closest node, or `START`/`END` for `Start`,
//! `ENDD`, `end`..), undeclared or `Sum` error fields, undeclared
//! cache key and absorbed fields, `retry`/`cache` on a Battalion, any Aegis
//! on a Gate, a route on or to a worker template, a node declared twice,
//! a function declared under another name than its id, and a node nothing
//! leads to: no edge into it, no route to it (in graph! or in a function's
//! attribute), not in `dynamic { .. }` and not a worker template. The last
//! one's error names `dynamic { x }`, since a node reached only by
//! `Directive::goto` is the usual cause; a graph with a `gate(..)` or
//! `node(..)` node leaves it to `WarGraph::validate`, as a Gate's targets
//! are in an expression graph! cannot read. What only the engine knows
//! (registered names, the cache backend) stays a `validate`/`start`
//! error.
//!
//! Each is a plain `error:` at the offending token, including the names a
//! function's own `#[aegis]` uses: `graph!` reads the attribute through a
//! hidden macro the attribute defines beside the function, under the
//! function's name, so it can check it against the graph. A route target,
//! error, absorbed or cache key field in the attribute is reported at its
//! token (at the node's name in `graph!` when the function is in another
//! crate, with the token named in the message); a `Sum` error field at the
//! `Sum` in the schema. A function with a mistake of its own is reported
//! once, by its attribute: its marker and hidden macro are still emitted,
//! so `graph!` and `add_aegis_node` naming it add no error. A path that
//! names a function without `#[aegis]` is an error at the path, "`book` has
//! no `#[aegis]`: add `#[aegis]` above `fn book`, or declare the node with
//! its `NodeSpec`: `book = node(..)`"; one that names nothing is rustc's
//! unresolved import, with its advice. Because of the hidden macro, an
//! `#[aegis]` function cannot be named like a standard macro (`write`,
//! `format`, `vec`, ..): rename it and keep the node id with `id = ".."`.

mod attr;
mod digest;
mod duration;
#[cfg(test)]
mod duration_props;
mod errors;
mod graph;
mod json;
mod names;
mod policy;
mod template;

use proc_macro::TokenStream;

/// Makes an `async fn` a graph node carrying its own Aegis.
///
/// ```
/// use aegis::prelude::*;
///
/// #[aegis(retry(max = 5), timeout(idle = "10s"), on_error(route = cancel))]
/// async fn book(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
///     ctx.heartbeat();
///     let mut delta = StateDelta::new();
///     delta.set("booking", format!("seat for {}", state.get("traveller").map_or("?".into(), ToString::to_string)))?;
///     Ok(delta)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The function is still callable as written ...
/// let delta = book(&Battlefield::new(), &NodeContext::detached("book")).await?;
/// assert!(delta.get("booking").is_some());
///
/// // ... and `book {}` is its node marker for builders (graph! takes `book`).
/// let schema = BattlefieldSchema::new(vec![
///     FieldSpec::new(FieldName::new("booking")?, DispatchRule::LastWrite, None, false),
/// ]);
/// let mut graph = WarGraph::new(schema, EngineLimits::default());
/// graph.add_aegis_node(book {});
/// let aegis = graph.aegis_for(&NodeId::new("book")).ok_or("no aegis")?;
/// assert_eq!(aegis.retry.as_ref().map(|r| r.max_attempts), Some(5));
/// # Ok(())
/// # }
/// ```
///
/// The function must be `async fn name(state: &Battlefield, ctx: &NodeContext)
/// -> Result<T, E>` with `T` either `StateDelta` or `Directive` and
/// `E: Into<StateNodeError>`, so `?` works on `StateError`, `&str`, `String`
/// and anything with a `From` impl. It stays exactly as written; the
/// attribute adds a same-named, field-less, hidden struct (`book {}`) that
/// implements `AegisNodeFn` (id, kind name, Aegis, and the call), and a
/// same-named hidden macro through which `graph!` checks the attribute
/// against the graph (so the function's name cannot be a standard macro's,
/// such as `write`). `WarGraph::add_aegis_node(book {})` declares it;
/// `graph!` names it by path, from any module or crate. A bare `#[aegis]`
/// makes a node with no Aegis of its own (the graph's default still
/// applies).
///
/// A function may take a dependency first, `async fn name(deps: &D, state:
/// &Battlefield, ctx: &NodeContext)`, with `D: Send + Sync + 'static` one
/// concrete type: the node owns an instance and lends it to every run. It is
/// added with its instance, `add_aegis_node(name::with(instance))` on a
/// builder and `name(instance)` in `graph!`.
///
/// The marker also carries a digest of the function's tokens, signature and
/// body (`AegisNodeFn::CODE_VERSION`, 32 hex digits computed at compile
/// time; comments, doc comments and layout do not change it): node cache
/// keys cover it, so an edited function is never served the answers its
/// previous version cached, in either cache scope. The graph fingerprint
/// does not, so editing a function never blocks a `resume`.
///
/// # Grammar
///
/// ```text
/// #[aegis]                         // a node with no Aegis of its own
/// #[aegis(                         // keys `,`-separated, each optional and once, in any order
///     retry | retry(max = 5, initial = "500ms", factor = 2.0, max_interval = "60s",
///                   jitter = true, on = transient | unknown | all | never | "predicate name",
///                   respect_retry_after = true, max_retry_after = "60s"),   // keys optional
///     timeout(run = "120s", idle = "10s", first_chunk = "5s"),              // at least one
///     on_error(route = node [, error_field = field])                      // one handler:
///         | on_error(absorb | absorb(field = <JSON literal>, ..))
///         | on_error(custom = "handler name"),
///     cache(ttl = "15m" [, key = default | fields(a, b, ..)] [, scope = graph | node]
///           [, fallback_results = true]),
///     id = "node id",                // default: the function's name
///     crate = "::aegis",             // default: `::aegis`
/// )]
/// ```
///
/// [The crate docs](crate) give each key's meaning and what is checked at
/// compile time.
#[proc_macro_attribute]
pub fn aegis(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::expand(args.into(), item.into()).into()
}

/// Declares a whole `WarGraph` in one block and evaluates to it.
///
/// ```
/// use aegis::prelude::*;
///
/// #[aegis(retry(max = 3), on_error(route = cancel, error_field = booking_error))]
/// async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
///     Err(StateNodeError::permanent("card declined"))
/// }
///
/// #[aegis]
/// async fn cancel(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
///     let mut delta = StateDelta::new();
///     delta.set("status", format!("cancelled: {}", state.get("booking_error").is_some()))?;
///     Ok(delta)
/// }
///
/// let graph = graph! {
///     schema {
///         booking: LastWrite,
///         booking_error: LastWrite,
///         status: LastWrite = "pending",
///         log: Append = [] cache = deny,
///     }
///     nodes {
///         book,
///         cancel,
///     }
///     default_aegis { timeout(run = "30s") }
///     edges {
///         START -> book -> END;
///         cancel -> END;
///     }
/// };
/// assert_eq!(graph.nodes().count(), 2);
/// assert!(graph.aegis_for(&NodeId::new("book")).is_some_and(|a| a.on_error.is_some()));
/// // `cancel` has no Aegis of its own, so the default governs it.
/// assert_eq!(graph.aegis_for(&NodeId::new("cancel")), graph.default_aegis());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Grammar
///
/// Sections come in any order, each at most once. `nodes` is required, and
/// so is an edge from `START`.
///
/// ```text
/// graph! {
///     crate = "::aegis";                       // optional
///     limits = EngineLimits::default().with_max_supersteps(50);  // optional, any expression
///     schema {                                 // fields, `,`-separated; modifiers in any order
///         name: LastWrite | Append | Sum | Merge  [= <JSON literal>]  [required]  [cache = deny | allow]
///     }
///     nodes {                                  // nodes, `,`-separated
///         [#[aegis(..)]] [worker] path::to::function             // an #[aegis] fn; id = its id
///         [#[aegis(..)]] [worker] path::to::function(<instance>) // one taking a dependency first
///         [#[aegis(..)]] [worker] id = path::to::function[(<instance>)]  // when #[aegis(id = "id")] renamed it
///         [#[aegis(..)]] [worker] id = paladin(<Paladin expr>, "template {field}" -> output_field [, task_independent])
///         [#[aegis(..)]] id = battalion(<WarGraph expr> [, inputs(parent -> child, ..)] [, outputs(child -> parent, ..)])
///         [#[aegis(..)]] id = gate(<NodeSpec expr>)
///         [#[aegis(..)]] [worker] id = node(<NodeSpec expr>)
///     }
///     default_aegis { retry(..), timeout(..), .. }   // optional: WarGraph::with_default_aegis
///     edges {                                  // statements, `;`-separated
///         START -> a -> b -> END;              // a chain; START only first, END only last
///         a -> [b, c] -> d;                    // fan-out and fan-in: every pair is an edge
///         a ?> "evaluator" -> [x, END];        // conditional edges (one target needs no `[]`)
///     }
///     dynamic { x, y }                         // optional: mark_dynamic_target, for Directive::goto
///     musters { planner -> worker, .. }        // optional: declare_muster, `,`-separated
/// }
/// ```
///
/// `default_aegis { .. }` and a node's `#[aegis(..)]` take the policy
/// grammar of [`macro@aegis`], without `id` and `crate`. A function's
/// `<instance>` is the dependency it takes first (see [`macro@aegis`]), any
/// expression. `musters { planner -> worker }` declares that `planner`
/// musters tasks to the worker template `worker`; once one is declared, a
/// muster not declared fails the run.
///
/// Every node must be reachable: an edge into it, a route to it, a mark in
/// `dynamic { .. }`, or being a worker template. A node that only
/// `Directive::goto` reaches belongs in `dynamic { .. }`; without it the
/// goto fails the run, and graph! reports the node at compile time as
/// having no edge into it (unless the graph has a `gate(..)` or `node(..)`,
/// whose Gate targets graph! cannot read: then `WarGraph::validate` does).
///
/// A `worker` Paladin's template reads the task it runs as: `{task.key}`,
/// `{task.payload}` and `{task.<field>}` of the payload. A worker template
/// that reads nothing of its task is a compile error (every task would send
/// the same prompt) unless it ends in `, task_independent`; a `{task.…}`
/// placeholder in a node that is not a worker template is one too. The
/// payload's fields are checked by `WarGraph::validate` once declared with
/// `declare_task_fields`, or else when the task renders.
///
/// A node's `#[aegis(..)]` in `graph!` is its own Aegis and replaces the
/// function's wholesale, as `set_aegis` does; a bare `#[aegis]` there gives
/// the node an empty Aegis of its own, opting it out of `default_aegis`.
/// Node ids are identifiers: edges and routes name them, and a function
/// node's id is checked at compile time against its attribute's `id`, as
/// are the nodes and fields its attribute names.
/// `gate(..)` and `node(..)` take a ready `NodeSpec`; `gate` tells `graph!`
/// the node is a Gate, so an Aegis on it is rejected.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    graph::expand(input.into()).into()
}

/// Not a public API: what an `#[aegis]` function's descriptor macro calls
/// back with `graph!`'s input and the attribute's tokens, to check the one
/// against the other and add the node, or to read the attribute's route in
/// the chain that finds nodes nothing leads to; and what `graph!`'s
/// fallback calls for a path with no descriptor, to report it. Reached as
/// `::aegis::__private::__graph_node`.
#[doc(hidden)]
#[proc_macro]
pub fn __graph_node(input: TokenStream) -> TokenStream {
    graph::expand_fn_node(input.into()).into()
}
