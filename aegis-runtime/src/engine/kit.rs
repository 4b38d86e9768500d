//! The [`Kit`]: everything an engine keeps but its waypoint store, which is
//! all the attempt rules may reach. Not generic, so the attempt layer is
//! compiled once, whatever the store.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::hooks::{
    EdgeConditionEvaluator, ErrorHandler, NodeInterceptor, RetryPredicateEvaluator,
};
use super::stream::events::{StreamEvent, StreamMode};
use super::stream::tap::{AttemptTap, StreamTap};
use crate::cache::NodeCacheHandle;
use crate::graph::{AttemptShared, EffectScope, HeartbeatHandle, MusterTask};
use crate::id::NodeId;
use crate::paladin::{PaladinPort, UnconfiguredPaladinPort};
use crate::policy::{PriceTable, SpendBudget};
use crate::trace::{TraceEvent, TraceSink, log_event};

/// What a [`WarEngine`](super::WarEngine) runs attempts with: its port,
/// hooks, sinks, cache, cancellation and the bounds a Battalion's child
/// inherits. The engine adds only its store.
pub(crate) struct Kit {
    pub(crate) paladin_port: Arc<dyn PaladinPort>,
    /// The cancellation token and the store's effect ledger (asked for
    /// once), as every attempt's `NodeContext` shares them.
    pub(crate) shared: Arc<AttemptShared>,
    pub(crate) retry_predicates: HashMap<String, Arc<dyn RetryPredicateEvaluator>>,
    pub(crate) edge_evaluators: HashMap<String, Arc<dyn EdgeConditionEvaluator>>,
    pub(crate) error_handlers: HashMap<String, Arc<dyn ErrorHandler>>,
    pub(crate) trace_sinks: Vec<Arc<dyn TraceSink>>,
    pub(crate) interceptors: Vec<Arc<dyn NodeInterceptor>>,
    pub(crate) node_cache: Option<NodeCacheHandle>,
    /// Enters every node cache key when set (see `with_cache_namespace`).
    pub(crate) cache_namespace: Option<Arc<str>>,
    /// Beaten after every superstep: a Battalion child beats its parent
    /// attempt's heartbeat this way.
    pub(crate) superstep_beat: Option<HeartbeatHandle>,
    /// Seeds backoff jitter per attempt (see `with_jitter_seed`).
    pub(crate) jitter_seed: Option<u64>,
    /// Runs each Function/Paladin attempt as a task of its own on a
    /// multi-thread runtime (see `with_isolated_attempts`).
    pub(crate) isolated_attempts: bool,
    /// A Battalion child's ceiling on its attempts' shutdown grace: its
    /// parent attempt's own grace, so the child halts (and writes its
    /// Halted waypoint) before the parent would have given up.
    pub(crate) grace_cap: Option<std::time::Duration>,
    /// A Battalion child's enclosing deadline: when its parent attempt is
    /// cut (the Battalion's run timeout, the parent's run deadline, or its
    /// own enclosing one). A retry whose backoff would end past it is
    /// skipped, like one past the run budget.
    pub(crate) enclosing_deadline: Option<tokio::time::Instant>,
    /// The queue of a `RunStream` consuming this run (see
    /// `WarEngine::stream`); `None` for `start`/`resume`, which then pay
    /// one branch per event.
    pub(crate) stream: Option<Arc<StreamTap>>,
    /// What model calls cost (see `with_prices`).
    pub(crate) prices: Arc<PriceTable>,
    /// The run option spend budget, over the graph's default (see
    /// `with_spend_budget`).
    pub(crate) spend_budget: Option<SpendBudget>,
}

impl Kit {
    /// The engine's cancellation token.
    #[inline]
    pub(crate) fn cancellation(&self) -> &CancellationToken {
        &self.shared.cancellation
    }

    /// The store's effect ledger, if it keeps one.
    #[inline]
    pub(crate) fn effects(&self) -> Option<&Arc<EffectScope>> {
        self.shared.effects.as_ref()
    }

    /// A kit with nothing registered, over the effect ledger `effects`.
    pub(crate) fn new(effects: Option<Arc<EffectScope>>) -> Self {
        Kit {
            paladin_port: Arc::new(UnconfiguredPaladinPort),
            shared: AttemptShared::new(CancellationToken::new(), effects),
            retry_predicates: HashMap::new(),
            edge_evaluators: HashMap::new(),
            error_handlers: HashMap::new(),
            trace_sinks: Vec::new(),
            interceptors: Vec::new(),
            node_cache: None,
            cache_namespace: None,
            superstep_beat: None,
            jitter_seed: None,
            isolated_attempts: false,
            grace_cap: None,
            enclosing_deadline: None,
            stream: None,
            prices: Arc::default(),
            spend_budget: None,
        }
    }

    /// A copy of this kit whose cancellation token is a child of this
    /// one's (see `WarEngine::derived`). One place lists the fields, so a
    /// new one cannot be dropped by a copy.
    pub(crate) fn derived(&self) -> Kit {
        Kit {
            paladin_port: self.paladin_port.clone(),
            shared: AttemptShared::new(
                self.shared.cancellation.child_token(),
                self.shared.effects.clone(),
            ),
            retry_predicates: self.retry_predicates.clone(),
            edge_evaluators: self.edge_evaluators.clone(),
            error_handlers: self.error_handlers.clone(),
            trace_sinks: self.trace_sinks.clone(),
            interceptors: self.interceptors.clone(),
            node_cache: self.node_cache.clone(),
            cache_namespace: self.cache_namespace.clone(),
            superstep_beat: self.superstep_beat.clone(),
            jitter_seed: self.jitter_seed,
            isolated_attempts: self.isolated_attempts,
            grace_cap: self.grace_cap,
            enclosing_deadline: self.enclosing_deadline,
            stream: self.stream.clone(),
            prices: self.prices.clone(),
            spend_budget: self.spend_budget,
        }
    }

    /// Emits the event `make` builds at `level`, building it only when
    /// someone would receive it: a trace sink, the run's stream of events,
    /// or a `tracing` subscriber recording `level`. The events of every
    /// superstep and attempt go through here, so a run nobody observes
    /// allocates none of them. `level` must be the level
    /// `crate::trace::log_event` logs the event at (or a less verbose one),
    /// or a subscriber would miss it.
    #[inline]
    pub(crate) fn emit_with(&self, level: tracing::Level, make: impl FnOnce() -> TraceEvent) {
        let observed = !self.trace_sinks.is_empty()
            || self
                .stream
                .as_ref()
                .is_some_and(|tap| tap.wants(StreamMode::Events))
            || tracing::level_enabled!(level)
            || metrics_installed();
        if observed {
            self.emit(make());
        }
    }

    pub(crate) fn emit(&self, event: TraceEvent) {
        log_event(&event);
        #[cfg(feature = "metrics")]
        if let Some(observer) = crate::trace::observe::observer() {
            observer.event(&event);
        }
        if let Some(tap) = &self.stream {
            tap.push_with(StreamMode::Events, || StreamEvent::Trace(event.clone()));
        }
        if let Some((last, rest)) = self.trace_sinks.split_last() {
            for sink in rest {
                sink.emit(event.clone());
            }
            last.emit(event);
        }
    }

    /// The stream emitter of one attempt, when a stream wants tokens or
    /// custom events.
    #[inline]
    pub(crate) fn attempt_tap(
        &self,
        thread_id: &Arc<str>,
        node_id: &NodeId,
        task: Option<&MusterTask>,
        attempt: u32,
    ) -> Option<Arc<AttemptTap>> {
        let task_key = task.map(|t| t.task_key.as_str());
        self.stream
            .as_ref()?
            .attempt(thread_id, node_id, task_key, attempt)
    }
}

/// Whether metrics count this process's events (`metrics` feature).
#[inline]
fn metrics_installed() -> bool {
    #[cfg(feature = "metrics")]
    return crate::trace::observe::observer().is_some();
    #[cfg(not(feature = "metrics"))]
    false
}
