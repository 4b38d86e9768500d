//! The `WarEngine`: the superstep loop and the Aegis attempt loop.

mod attempt;
mod barrier;
mod battalion;
mod battalion_call;
mod config;
mod cursor;
mod ending;
pub(crate) mod evolve;
mod finished;
mod hooks;
mod index;
mod kit;
mod outcome;
mod presets;
mod run;
mod run_budget;
mod stream;
mod tally;

pub use crate::config::{ConfigError, EnvValue, MAX_CONFIG_DURATION_SECS};
pub use config::EngineConfig;
pub use hooks::{
    EdgeConditionEvaluator, ErrorHandler, InterceptorDecision, NodeInterceptor,
    RetryPredicateError, RetryPredicateEvaluator,
};
pub use outcome::RunOutcome;
pub use stream::{
    DEFAULT_STREAM_CAPACITY, NodeUpdate, RunStream, StreamEvent, StreamMode, StreamOptions,
};
/// Re-exported: a run's cancellation token, so callers name one version.
pub use tokio_util::sync::CancellationToken;

pub use crate::share::IntoShared;

use std::fmt;
use std::sync::Arc;
use tracing::Instrument;

use crate::cache::{NodeCache, NodeCacheHandle};
use crate::error::{EngineError, PolicyOffender};
use crate::few::Few;
use crate::graph::{
    AttemptShared, EffectScope, NodeSpec, ParleyExpiry, ParleyResponse, RunLedger, WarGraph,
};
use crate::id::NodeId;
use crate::id::validate_root_thread_id;
use crate::policy::{Aegis, ErrorHandlerSpec, PriceTable, RetryPredicate, SpendBudget};
use crate::state::initial_state;
use crate::trace::{TraceEvent, TraceSink};
use crate::waypoint::{
    Chronicle, InMemoryWaypointStore, ParleyDelivery, WaypointStatus, WaypointStore,
};
use cursor::Cursor;
use index::GraphIndex;
use kit::Kit;
use run_budget::RunBudget;

/// Runs [`WarGraph`]s, writing a waypoint per superstep to its store.
///
/// **Building one.** There is one way: [`WarEngine::new`] over a waypoint
/// store (or [`WarEngine::in_memory`], the same over an
/// [`InMemoryWaypointStore`]), then `with_*` builders for what it runs on:
/// [`WarEngine::with_llm`] (Paladin nodes), [`WarEngine::with_node_cache`]
/// (cache policies), [`WarEngine::with_paladin_port`] (a port of your own),
/// trace sinks, interceptors and the named hooks graphs refer to. An engine
/// without an LLM runs every node kind but Paladin nodes, which fail with a
/// `ConfigurationError` naming `with_llm`.
///
/// **Value or `Arc`.** Everything the engine keeps — its store, cache, LLM,
/// port, sinks and hooks — is taken as [`IntoShared`]:
/// pass the value, or an `Arc` of it when you keep a handle of your own (to
/// read the store's history beside the engine, or share one cache between
/// engines). The same holds for [`Chronicle`], the worker's
/// [`Client`](crate::worker::Client), [`WorkerPool`](crate::worker::WorkerPool)
/// and [`LeasedStore`](crate::worker::LeasedStore), and the LLM wrappers.
///
/// ```
/// use aegis_runtime::cache::InMemoryNodeCache;
/// use aegis_runtime::engine::WarEngine;
/// use aegis_runtime::llm::MockLlmAdapter;
/// use aegis_runtime::waypoint::InMemoryWaypointStore;
/// use aegis_runtime::worker::LeasedStore;
/// use std::sync::Arc;
///
/// // The engine owns the cache; the caller keeps handles on the store
/// // (to read its history) and on the mock (to inspect its calls).
/// let llm = Arc::new(MockLlmAdapter::new().with_default_response("hello"));
/// let store = Arc::new(InMemoryWaypointStore::new());
/// let engine = WarEngine::new(store.clone())
///     .with_llm(llm.clone())
///     .with_node_cache(InMemoryNodeCache::new());
/// assert!(Arc::ptr_eq(engine.store(), &store));
///
/// // A worker pool's engine factory is `WarEngine::new` itself, or a
/// // closure adding what its runs need.
/// let factory = move |store| WarEngine::new(store).with_llm(llm.clone());
/// # let _: &dyn Fn(Arc<LeasedStore>) -> WarEngine<LeasedStore> = &factory;
/// ```
///
/// Extension points (retry predicates, edge evaluators, interceptors, trace
/// sinks) are registered with builder methods; graphs name them by string and
/// `start`/`resume` check every name before a node runs.
pub struct WarEngine<S = InMemoryWaypointStore> {
    pub(crate) store: Arc<S>,
    /// `store` again when it is the in-memory store, recognised once at
    /// construction: every superstep then lends it its draft in place
    /// rather than building a `Waypoint` and awaiting a boxed `put`.
    pub(crate) memory_store: Option<Arc<InMemoryWaypointStore>>,
    /// Everything else the engine keeps: all the attempt rules reach.
    pub(crate) kit: Kit,
}

impl<S> fmt::Debug for WarEngine<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut predicates: Vec<_> = self.kit.retry_predicates.keys().collect();
        predicates.sort();
        let mut evaluators: Vec<_> = self.kit.edge_evaluators.keys().collect();
        evaluators.sort();
        f.debug_struct("WarEngine")
            .field("retry_predicates", &predicates)
            .field("edge_evaluators", &evaluators)
            .field("error_handlers", &{
                let mut h: Vec<_> = self.kit.error_handlers.keys().collect();
                h.sort();
                h
            })
            .field("trace_sinks", &self.kit.trace_sinks.len())
            .field("interceptors", &self.kit.interceptors.len())
            .field("cancelled", &self.kit.cancellation().is_cancelled())
            .field(
                "node_cache",
                &self
                    .kit
                    .node_cache
                    .as_ref()
                    .map(|c| c.backend().backend_name()),
            )
            .field("cache_namespace", &self.kit.cache_namespace)
            .field("jitter_seed", &self.kit.jitter_seed)
            .field("isolated_attempts", &self.kit.isolated_attempts)
            .field("streaming", &self.kit.stream.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// An engine writing waypoints to `store` (the store itself, or an
    /// `Arc` of it to keep a handle: see [`IntoShared`]),
    /// with no LLM: Paladin nodes fail with a `ConfigurationError` until
    /// [`WarEngine::with_llm`] or [`WarEngine::with_paladin_port`] gives it
    /// one. Every other node kind runs as is.
    pub fn new(store: impl IntoShared<S>) -> Self {
        let store = store.into_shared();
        WarEngine {
            memory_store: InMemoryWaypointStore::recognise(&store),
            kit: Kit::new(store.effect_ledger().map(|l| Arc::new(EffectScope::new(l)))),
            store,
        }
    }

    /// A copy of this engine whose cancellation token is a child of this
    /// one's (cancelling it stops only the copy): the base of a Battalion's
    /// child engine and of a streamed run's engine, which then set what
    /// differs. One place lists the fields, so a new one cannot be dropped
    /// by either.
    pub(crate) fn derived(&self) -> WarEngine<S> {
        WarEngine {
            store: self.store.clone(),
            memory_store: self.memory_store.clone(),
            kit: self.kit.derived(),
        }
    }

    /// Serves nodes with a `CachePolicy` from `cache`. Without a backend,
    /// any cache policy in a graph fails `start`/`resume` with
    /// `CachePolicyWithoutCacheBackend` before a node runs.
    /// The cache itself, or an `Arc` of it to share it between engines.
    pub fn with_node_cache(mut self, cache: impl IntoShared<dyn NodeCache>) -> Self {
        self.kit.node_cache = Some(NodeCacheHandle::new(cache.into_shared()));
        self
    }

    /// Keys every node cache entry this engine reads or writes in
    /// `namespace` — a tenant, say — as well: two engines with different
    /// namespaces never serve each other's entries, even over one shared
    /// backend and for the same graph, node, code and input; engines with
    /// the same namespace (or none) share them. A Battalion's child runs in
    /// its parent's namespace.
    ///
    /// The namespace is not stored with a thread: resume a thread with an
    /// engine in the namespace that started it (one engine per tenant; a
    /// worker pool's engine factory, which receives each run's
    /// `LeasedStore` and so its lease's thread id, can pick it per run).
    /// Prefix invalidation
    /// ([`CacheKey::graph_prefix`](crate::cache::CacheKey::graph_prefix) and the
    /// rest) spans every namespace; to drop one tenant's entries alone,
    /// give the tenant a backend of its own (a Redis key prefix).
    ///
    /// Without a namespace (the default) a key costs what it did before
    /// namespaces; with one, its few bytes more. An empty namespace is
    /// refused: `start`/`resume` of a graph with a cache policy fail with
    /// [`EngineError::EmptyCacheNamespace`] before a node runs (an unset
    /// tenant id must not share the engine-wide key space silently).
    ///
    /// ```
    /// use aegis_runtime::cache::{InMemoryNodeCache, NodeCache};
    /// use aegis_runtime::engine::WarEngine;
    /// use std::sync::Arc;
    ///
    /// let shared: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    /// let acme = WarEngine::in_memory()
    ///     .with_node_cache(shared.clone())
    ///     .with_cache_namespace("tenant-acme");
    /// let globex = WarEngine::in_memory()
    ///     .with_node_cache(shared)
    ///     .with_cache_namespace("tenant-globex");
    /// assert_eq!(acme.cache_namespace(), Some("tenant-acme"));
    /// # let _ = globex;
    /// ```
    pub fn with_cache_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.kit.cache_namespace = Some(Arc::from(namespace.into()));
        self
    }

    /// The node cache namespace ([`WarEngine::with_cache_namespace`]), if any.
    pub fn cache_namespace(&self) -> Option<&str> {
        self.kit.cache_namespace.as_deref()
    }

    /// Registers a retry predicate for `RetryPredicate::Custom(name)`.
    pub fn with_retry_predicate(
        mut self,
        name: impl Into<String>,
        predicate: impl IntoShared<dyn RetryPredicateEvaluator>,
    ) -> Self {
        self.kit
            .retry_predicates
            .insert(name.into(), predicate.into_shared());
        self
    }

    /// Registers an evaluator for conditional edges naming `name`.
    pub fn with_edge_evaluator(
        mut self,
        name: impl Into<String>,
        evaluator: impl IntoShared<dyn EdgeConditionEvaluator>,
    ) -> Self {
        self.kit
            .edge_evaluators
            .insert(name.into(), evaluator.into_shared());
        self
    }

    /// Registers a handler for `ErrorHandlerSpec::Custom(name)`.
    pub fn with_error_handler(
        mut self,
        name: impl Into<String>,
        handler: impl IntoShared<dyn ErrorHandler>,
    ) -> Self {
        self.kit
            .error_handlers
            .insert(name.into(), handler.into_shared());
        self
    }

    /// Draws backoff jitter from a generator seeded by `seed` and the
    /// attempt's identity (thread, node, task, superstep, attempt), so a run
    /// replays the same waits whatever the scheduling: for reproducible
    /// tests and simulations. Without it (the default) jitter comes from the
    /// thread-local, OS-seeded generator, which is what production wants:
    /// two engines sharing a seed would retry their threads in lockstep.
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.kit.jitter_seed = Some(seed);
        self
    }

    /// Runs every Function and Paladin attempt as a tokio task of its own
    /// when the engine runs on a multi-thread runtime, so a node that blocks
    /// its thread (a synchronous call that should have gone through
    /// `tokio::task::spawn_blocking`) holds only its own worker: the run
    /// still sees the attempt's deadline fire, records the timeout and moves
    /// on, and the abandoned task is aborted. Off by default: the task
    /// hand-off costs each attempt a spawn and a wake-up, which a chain or
    /// a fan-out of trivial nodes notices (`cargo bench --bench engine --
    /// engine_mt` measures it).
    /// Either way a result that arrives past its deadline is a timeout, never
    /// merged. On a current-thread runtime this changes nothing.
    pub fn with_isolated_attempts(mut self) -> Self {
        self.kit.isolated_attempts = true;
        self
    }

    /// Prices model calls by `prices` (dollars per million input and output
    /// tokens, by provider and model; supplied by you, nothing is fetched):
    /// every Paladin attempt's [`Spend`](crate::policy::Spend) then carries
    /// its cost, and money budgets apply. Without a price, a call counts
    /// tokens only.
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.kit.prices = Arc::new(prices);
        self
    }

    /// Bounds every `start`/`resume` call of this engine by `budget` in
    /// tokens and money (the run option; it wins over the graph's
    /// [`EngineLimits::spend_budget`](crate::graph::EngineLimits::spend_budget)).
    /// Each call has its own budget, as each has its own `run_timeout`.
    ///
    /// A retry or a fallback hop whose expected spend would pass what is
    /// left is skipped (a [`Skip`](crate::policy::Skip) on the node's record,
    /// a [`TraceEvent::StepSkipped`]) and the node's `on_error` handler runs;
    /// when nothing is left and a node needs more, the run ends with
    /// [`EngineError::SpendBudgetExhausted`] (no handler runs, as for the
    /// time budget).
    pub fn with_spend_budget(mut self, budget: impl Into<Option<SpendBudget>>) -> Self {
        self.kit.spend_budget = budget.into();
        self
    }

    /// The ledger of one `start`/`resume` call of `graph`.
    fn ledger(&self, graph: &WarGraph) -> RunLedger {
        RunLedger::new(
            self.kit.prices.clone(),
            self.kit.spend_budget.or(graph.limits.spend_budget),
        )
    }

    /// Adds a trace sink.
    pub fn with_trace_sink(mut self, sink: impl IntoShared<dyn TraceSink>) -> Self {
        self.kit.trace_sinks.push(sink.into_shared());
        self
    }

    /// Adds an interceptor; interceptors run in the order added.
    pub fn with_interceptor(mut self, interceptor: impl IntoShared<dyn NodeInterceptor>) -> Self {
        self.kit.interceptors.push(interceptor.into_shared());
        self
    }

    /// Uses `token` for shutdown. Once it is cancelled, running attempts get
    /// `EngineLimits::shutdown_grace`, backoff waits end at once, and the run
    /// halts; resume it with an engine holding an uncancelled token.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.kit.shared = AttemptShared::new(token, self.kit.shared.effects.clone());
        self
    }

    /// The engine's cancellation token.
    pub fn cancellation(&self) -> &CancellationToken {
        self.kit.cancellation()
    }

    /// The waypoint store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// A Chronicle over this engine's store.
    pub fn chronicle(&self) -> Chronicle<S> {
        Chronicle::new(self.store.clone())
    }

    /// Validates `graph` against this engine: the graph's own checks plus
    /// every registered name it uses.
    pub fn validate(&self, graph: &WarGraph) -> Result<(), EngineError> {
        let mut problems = graph.problems();
        problems.extend(self.registry_problems(graph));
        EngineError::from_problems(problems)
    }

    /// What only this engine can know: registered names and the cache
    /// backend, for `graph` and every Battalion child in it.
    fn registry_problems(&self, graph: &WarGraph) -> Vec<EngineError> {
        let mut problems = Vec::new();
        for (id, spec) in &graph.nodes {
            if let NodeSpec::Battalion { child, .. } = spec
                && let Err(error) = EngineError::from_problems(self.registry_problems(child))
            {
                problems.push(EngineError::BattalionChildInvalid {
                    node: id.clone(),
                    error: Box::new(error),
                });
            }
        }

        let entries: Vec<(Option<&NodeId>, &Aegis)> = graph.aegis_entries().collect();
        let unregistered: Vec<PolicyOffender> = entries
            .iter()
            .filter_map(
                |(node, aegis)| match aegis.retry.as_ref().map(|r| &r.retry_on) {
                    Some(RetryPredicate::Custom(name))
                        if !self.kit.retry_predicates.contains_key(name) =>
                    {
                        Some(PolicyOffender::new(
                            *node,
                            format!("retry predicate `{name}` is not registered"),
                        ))
                    }
                    _ => None,
                },
            )
            .collect();
        if !unregistered.is_empty() {
            problems.push(EngineError::UnregisteredRetryPredicate {
                offenders: unregistered,
            });
        }

        let unregistered: Vec<PolicyOffender> = entries
            .iter()
            .filter_map(|(node, aegis)| match &aegis.on_error {
                Some(ErrorHandlerSpec::Custom(name))
                    if !self.kit.error_handlers.contains_key(name) =>
                {
                    Some(PolicyOffender::new(
                        *node,
                        format!("error handler `{name}` is not registered"),
                    ))
                }
                _ => None,
            })
            .collect();
        if !unregistered.is_empty() {
            problems.push(EngineError::UnregisteredErrorHandler {
                offenders: unregistered,
            });
        }

        let mut evaluators: Vec<String> = graph
            .conditional
            .iter()
            .filter(|c| !self.kit.edge_evaluators.contains_key(&c.evaluator))
            .map(|c| c.evaluator.clone())
            .collect();
        evaluators.sort();
        evaluators.dedup();
        if !evaluators.is_empty() {
            problems.push(EngineError::UnregisteredEdgeEvaluator { names: evaluators });
        }
        if self.kit.node_cache.is_none()
            && let Some(missing) = crate::graph::missing_backend_error(graph)
        {
            problems.push(missing);
        }
        if self.kit.cache_namespace.as_deref() == Some("") {
            let nodes = crate::graph::cached_nodes(graph);
            if !nodes.is_empty() {
                problems.push(EngineError::EmptyCacheNamespace { nodes });
            }
        }
        problems
    }

    /// Starts a new thread with `input` (a JSON object of field values).
    ///
    /// `Err` only when the run cannot start (validation, bad input, an
    /// existing thread, the store); a run that executed returns
    /// `Ok(RunOutcome)`, failed or not. A thread id no store can hold, or
    /// one containing `>` (reserved for Battalion child threads, see
    /// [`battalion_thread_id`](crate::id::battalion_thread_id)), is
    /// [`EngineError::InvalidThreadId`] before anything runs.
    pub async fn start(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        input: serde_json::Value,
    ) -> Result<RunOutcome, EngineError> {
        validate_root_thread_id(thread_id)?;
        self.start_thread(graph, thread_id, input).await
    }

    /// [`WarEngine::start`] on a thread id the engine made itself (a
    /// Battalion's child), which carries the reserved separator.
    pub(crate) async fn start_thread(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        input: serde_json::Value,
    ) -> Result<RunOutcome, EngineError> {
        self.validate(graph)?;
        if self.store.latest(thread_id).await?.is_some() {
            return Err(EngineError::ThreadAlreadyExists {
                thread_id: thread_id.to_string(),
            });
        }
        let state = initial_state(&graph.schema, &input).map_err(EngineError::InvalidInput)?;
        let index = GraphIndex::of(graph);
        let vanguard = index.entry_activations();
        let run_budget = RunBudget::new(graph.limits.run_timeout).with_spend(self.ledger(graph));
        let cursor = Cursor {
            step: cursor::Step {
                thread_id: Arc::from(thread_id),
                fingerprint: graph.shared_fingerprint(),
                state,
                vanguard: vanguard.into(),
                parley: None,
            },
            seq: 0,
            superstep: 0,
            begun: false,
            completed: Default::default(),
            visits: tally::VisitTally::from_visits(Default::default(), &index),
            manifest: Some(graph.shared_manifest()),
            previous_graph: None,
            handled: Vec::new(),
        };
        let status = if cursor.step.vanguard.is_empty() {
            WaypointStatus::Completed
        } else {
            WaypointStatus::Running
        };
        self.put_draft(&mut cursor.draft(0, status, Few::Zero))
            .await?;
        self.run(&index, cursor, run_budget, false).await
    }

    /// Continues a thread from its latest waypoint: a halted run re-runs the
    /// activations it did not finish (from attempt 1), a failed run re-runs
    /// the failed ones, a completed run returns at once.
    ///
    /// `graph` may differ from the graph the thread ran: the resume goes on
    /// when the change is compatible with the waiting thread, or a
    /// migration registered with [`WarGraph::with_migration`] rewrites its
    /// state; otherwise it fails with `GraphMismatch`, which lists why and
    /// what differs (see the README's "Deploying a new version"). Waypoints
    /// written after such a change record both fingerprints
    /// ([`Waypoint::previous_graph`](crate::waypoint::Waypoint::previous_graph)).
    /// Fails with
    /// `UnexpectedParleyResponse` if a response is given to a thread that is
    /// not awaiting one. A thread id no store can hold, or a Battalion's
    /// child thread (resume its parent instead), is
    /// [`EngineError::InvalidThreadId`] before anything runs.
    pub async fn resume(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
    ) -> Result<RunOutcome, EngineError> {
        validate_root_thread_id(thread_id)?;
        self.resume_thread(graph, thread_id, response).await
    }

    /// [`WarEngine::resume`] on a thread id the engine made itself (a
    /// Battalion's child).
    pub(crate) async fn resume_thread(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
    ) -> Result<RunOutcome, EngineError> {
        self.validate(graph)?;
        let Some(latest) = self.store.latest(thread_id).await? else {
            return Err(EngineError::ThreadNotFound {
                thread_id: thread_id.to_string(),
            });
        };
        // A changed graph takes the thread over only if it is compatible
        // with where the thread waits (or migrates it).
        let latest = evolve::onto(graph, latest)?;
        let index = GraphIndex::of(graph);
        let run_budget = RunBudget::new(graph.limits.run_timeout).with_spend(self.ledger(graph));
        let created_at = latest.created_at;
        let requests = match &latest.status {
            WaypointStatus::AwaitingInput { requests } => Some(requests.clone()),
            _ => None,
        };
        let mut cursor = Cursor::from_waypoint(latest, &index);
        match (requests, response) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(EngineError::UnexpectedParleyResponse {
                    thread_id: thread_id.to_string(),
                });
            }
            (Some(_), None) => {
                return Err(EngineError::ParleyResponseRequired {
                    thread_id: thread_id.to_string(),
                });
            }
            (Some(requests), Some(mut response)) => {
                // Expiry is measured from the waypoint that asked.
                let age = std::time::SystemTime::now()
                    .duration_since(created_at)
                    .unwrap_or_default();
                for (node, request) in &requests {
                    let expired = request.expires_after.is_some_and(|after| age >= after);
                    if !expired {
                        continue;
                    }
                    match &request.on_expire {
                        ParleyExpiry::Fail => {
                            let error = EngineError::ParleyExpired { node: node.clone() };
                            return self.fail(cursor, error, None, Vec::new()).await;
                        }
                        ParleyExpiry::Proceed(default) => {
                            response = ParleyResponse::new(default.clone());
                        }
                    }
                }
                cursor.step.parley = Some(Arc::new(ParleyDelivery {
                    nodes: requests.into_iter().map(|(n, _)| n).collect(),
                    response,
                }));
            }
        }
        self.run(&index, cursor, run_budget, true).await
    }

    async fn run(
        &self,
        index: &GraphIndex<'_>,
        cursor: Cursor,
        run_budget: RunBudget,
        resumed: bool,
    ) -> Result<RunOutcome, EngineError> {
        let thread_id = cursor.step.thread_id.to_string();
        let span = tracing::info_span!(
            "aegis.run",
            otel.status_code = tracing::field::Empty,
            thread_id = %thread_id,
            resumed,
            outcome = tracing::field::Empty,
        );
        self.kit.emit(TraceEvent::RunStarted {
            thread_id: thread_id.clone(),
            resumed,
        });
        let ledger = run_budget.spend().clone();
        let outcome = self
            .drive(index, cursor, run_budget)
            .instrument(span.clone())
            .await;
        let spent = ledger.spent();
        if !spent.is_zero() || ledger.budget().is_some() {
            self.kit.emit(TraceEvent::RunSpend {
                thread_id: thread_id.clone(),
                spend: spent,
                remaining: ledger.budget().map(|_| ledger.remaining()),
            });
        }
        if !span.is_disabled() {
            let name = outcome.as_ref().map_or("Error", RunOutcome::name);
            span.record("outcome", name);
            if matches!(name, "Failed" | "Error") {
                span.record("otel.status_code", "ERROR");
            }
        }
        if let Ok(o) = &outcome {
            self.kit.emit(TraceEvent::RunFinished {
                thread_id,
                outcome: o.name(),
            });
        }
        outcome
    }
}
