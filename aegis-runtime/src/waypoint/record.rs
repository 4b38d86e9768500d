//! What a waypoint records of each node.

use serde::Deserialize;
use serde::Serialize;
use std::fmt;
use std::time::SystemTime;

use crate::error::NodeError;
use crate::graph::EffectNote;
use crate::id::NodeId;
use crate::policy::ErrorHandlerSpec;
use crate::policy::hop::HopNote;
use crate::policy::{Skip, Spend};
use crate::trace::BudgetBound;
use crate::trace::CacheOrigin;

/// How a node's activation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum NodeStatus {
    /// It produced a directive.
    Succeeded,
    /// It failed finally (whether or not a handler then decided what next).
    Failed,
    /// It did not finish: `"shutdown"` (re-listed for resume) or
    /// `"interceptor"` (skipped by a `NodeInterceptor`).
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The attempt, 1-based.
    pub attempt: u32,
    /// When it started.
    pub started_at: SystemTime,
    /// How long it ran.
    pub duration_ms: u64,
    /// How it failed.
    pub error: NodeError,
    /// What it spent (a Paladin node's completions, what a failed or
    /// abandoned stream delivered included). Absent in older waypoints
    /// and for nodes that call no model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::policy::Spend>,
}

/// One node activation in one superstep.
///
/// What nearly every record holds is in its public fields. What only some
/// activations have (a model call's spend, skipped retries and hops, the
/// node's effects, fallback hops) is read through methods
/// ([`spend`](Self::spend), [`skips`](Self::skips),
/// [`effects`](Self::effects), [`hops`](Self::hops)) and set with
/// `with_*` builders: it is kept out of line, so a record without any of it
/// stays small as it moves through the engine on every superstep. The
/// serialized form is flat either way: each of those is a field of its own,
/// absent when empty.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeExecutionRecord {
    /// The node.
    pub node_id: NodeId,
    /// The task key, for a mustered task.
    pub task_key: Option<String>,
    /// How it ended.
    pub status: NodeStatus,
    /// The attempt that finally succeeded, or the one that exhausted the
    /// budget (1 for a cache hit).
    pub attempt: u32,
    /// Every failed attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Whether the result came from the node cache.
    pub cache_hit: bool,
    /// On a cache hit, who produced the served entry (`None` otherwise, and
    /// for an entry stored before entries recorded it). Absent from
    /// waypoints written before it existed. Shared with the cache entry
    /// that served it (no copy of its strings per hit).
    pub cache_origin: Option<std::sync::Arc<CacheOrigin>>,
    /// When the activation started: the engine reads the wall clock once
    /// per `start`/`resume` call and adds the monotonic time since, so a
    /// call's records keep the order they ran in whatever the wall clock
    /// does meanwhile.
    pub started_at: SystemTime,
    /// How long the activation took, backoff waits included.
    pub duration_ms: u64,
    /// Set when a retry was skipped because its wait would overrun a
    /// deadline (the node then failed with its last attempt's error).
    /// Absent in older waypoints.
    pub retry_skipped: Option<RetrySkip>,
    /// The rarer parts; `None` when all of them are empty (so equal records
    /// compare equal however they were built).
    pub(in crate::waypoint) extras: Option<Box<Extras>>,
}

/// The parts of a record only some activations have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::waypoint) struct Extras {
    spend: Option<Spend>,
    skips: Vec<Skip>,
    effects: Vec<EffectNote>,
    hops: Vec<HopNote>,
}

impl Extras {
    fn is_empty(&self) -> bool {
        self.spend.is_none()
            && self.skips.is_empty()
            && self.effects.is_empty()
            && self.hops.is_empty()
    }

    /// `self` out of line, or `None` when it holds nothing.
    fn boxed(self) -> Option<Box<Extras>> {
        (!self.is_empty()).then(|| Box::new(self))
    }
}

impl NodeExecutionRecord {
    /// What the activation spent, every attempt together (a Paladin node's
    /// completions; `None` for nodes that call no model, and in older
    /// waypoints).
    pub fn spend(&self) -> Option<Spend> {
        self.extras.as_ref().and_then(|e| e.spend)
    }

    /// Retries and fallback hops not sent, and why (a spend budget, a price
    /// ratio, a context window), in order. Empty in older waypoints.
    pub fn skips(&self) -> &[Skip] {
        self.extras.as_ref().map_or(&[], |e| &e.skips)
    }

    /// What became of each of the node's effects
    /// ([`NodeContext::effect`](crate::graph::NodeContext::effect)) in each
    /// attempt, in order. Empty for nodes without effects, and in older
    /// waypoints.
    pub fn effects(&self) -> &[EffectNote] {
        self.extras.as_ref().map_or(&[], |e| &e.effects)
    }

    /// The fallback hops inside the activation's attempts (a Paladin node's
    /// chain moving from one provider to the next), in order, each with its
    /// attempt: the record of a call that succeeded after hopping says so.
    /// Empty for activations that never hopped, and in older waypoints.
    pub fn hops(&self) -> &[HopNote] {
        self.extras.as_ref().map_or(&[], |e| &e.hops)
    }

    /// Whether the record holds any of [`spend`](Self::spend),
    /// [`skips`](Self::skips), [`effects`](Self::effects) or
    /// [`hops`](Self::hops).
    pub(crate) fn has_extras(&self) -> bool {
        self.extras.is_some()
    }

    /// A record of what an engine activation kept: every public field,
    /// the rarer parts empty (set them in place).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn of_activation(
        node_id: NodeId,
        task_key: Option<String>,
        status: NodeStatus,
        attempt: u32,
        attempts: Vec<AttemptRecord>,
        started_at: SystemTime,
        duration_ms: u64,
        retry_skipped: Option<RetrySkip>,
    ) -> Self {
        NodeExecutionRecord {
            node_id,
            task_key,
            status,
            attempt,
            attempts,
            cache_hit: false,
            cache_origin: None,
            started_at,
            duration_ms,
            retry_skipped,
            extras: None,
        }
    }

    /// Sets [`effects`](Self::effects) in place.
    pub(crate) fn set_effects(&mut self, effects: Vec<EffectNote>) {
        self.change_extras(|e| e.effects = effects);
    }

    /// Applies `change` to the rarer parts, keeping them out of line only
    /// while they hold something.
    fn change_extras(&mut self, change: impl FnOnce(&mut Extras)) {
        let extras = self.extras.get_or_insert_default();
        change(extras);
        if extras.is_empty() {
            self.extras = None;
        }
    }

    /// Sets what a metered activation (a Paladin node's) spent and
    /// skipped, and the hops it made, at once.
    pub(crate) fn set_metered(
        &mut self,
        spend: Option<Spend>,
        skips: Vec<Skip>,
        hops: Vec<HopNote>,
    ) {
        self.change_extras(|e| {
            e.spend = spend;
            e.skips = skips;
            e.hops = hops;
        });
    }

    /// Sets [`task_key`](Self::task_key): the task key, for a mustered task.
    #[must_use]
    pub fn with_task_key(mut self, task_key: Option<impl Into<String>>) -> Self {
        self.task_key = task_key.map(Into::into);
        self
    }

    /// Sets [`attempts`](Self::attempts): every failed attempt, in order.
    #[must_use]
    pub fn with_attempts(mut self, attempts: Vec<AttemptRecord>) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets [`cache_hit`](Self::cache_hit): whether the result came from the node
    /// cache.
    #[must_use]
    pub fn with_cache_hit(mut self, cache_hit: bool) -> Self {
        self.cache_hit = cache_hit;
        self
    }

    /// Sets [`cache_origin`](Self::cache_origin): on a cache hit, who produced the
    /// served entry (`None` otherwise, and for an entry stored before entries
    /// recorded it).
    #[must_use]
    pub fn with_cache_origin(
        mut self,
        cache_origin: impl Into<Option<std::sync::Arc<CacheOrigin>>>,
    ) -> Self {
        self.cache_origin = cache_origin.into();
        self
    }

    /// Sets [`retry_skipped`](Self::retry_skipped): set when a retry was skipped
    /// because its wait would overrun a deadline (the node then failed with its
    /// last attempt's error).
    #[must_use]
    pub fn with_retry_skipped(mut self, retry_skipped: impl Into<Option<RetrySkip>>) -> Self {
        self.retry_skipped = retry_skipped.into();
        self
    }

    /// Sets [`spend`](Self::spend): what the activation spent.
    #[must_use]
    pub fn with_spend(mut self, spend: impl Into<Option<Spend>>) -> Self {
        let spend = spend.into();
        self.change_extras(|e| e.spend = spend);
        self
    }

    /// Sets [`skips`](Self::skips): the retries and hops not sent.
    #[must_use]
    pub fn with_skips(mut self, skips: Vec<Skip>) -> Self {
        self.change_extras(|e| e.skips = skips);
        self
    }

    /// Sets [`effects`](Self::effects): what became of the node's effects.
    #[must_use]
    pub fn with_effects(mut self, effects: Vec<EffectNote>) -> Self {
        self.change_extras(|e| e.effects = effects);
        self
    }

    /// Sets [`hops`](Self::hops): the fallback hops inside the attempts.
    #[must_use]
    pub fn with_hops(mut self, hops: Vec<HopNote>) -> Self {
        self.change_extras(|e| e.hops = hops);
        self
    }

    /// `node_id` ended as `status` on attempt `attempt`, started at
    /// `started_at` and took `duration_ms`; no task, no failed attempts, no
    /// cache hit (set them with the `with_*` builders).
    pub fn new(
        node_id: NodeId,
        status: NodeStatus,
        attempt: u32,
        started_at: SystemTime,
        duration_ms: u64,
    ) -> Self {
        NodeExecutionRecord {
            node_id,
            task_key: None,
            status,
            attempt,
            attempts: Vec::new(),
            cache_hit: false,
            cache_origin: None,
            started_at,
            duration_ms,
            retry_skipped: None,
            extras: None,
        }
    }
}

impl fmt::Debug for NodeExecutionRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Flat, as the record reads: the out-of-line parts by name.
        f.debug_struct("NodeExecutionRecord")
            .field("node_id", &self.node_id)
            .field("task_key", &self.task_key)
            .field("status", &self.status)
            .field("attempt", &self.attempt)
            .field("attempts", &self.attempts)
            .field("cache_hit", &self.cache_hit)
            .field("cache_origin", &self.cache_origin)
            .field("started_at", &self.started_at)
            .field("duration_ms", &self.duration_ms)
            .field("retry_skipped", &self.retry_skipped)
            .field("spend", &self.spend())
            .field("skips", &self.skips())
            .field("effects", &self.effects())
            .field("hops", &self.hops())
            .finish()
    }
}

/// The record as it is written: every part a field of its own, borrowed.
#[derive(Serialize)]
struct RecordOut<'a> {
    node_id: &'a NodeId,
    task_key: &'a Option<String>,
    status: &'a NodeStatus,
    attempt: u32,
    attempts: &'a [AttemptRecord],
    cache_hit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_origin: &'a Option<std::sync::Arc<CacheOrigin>>,
    started_at: SystemTime,
    duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_skipped: &'a Option<RetrySkip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spend: Option<Spend>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    skips: &'a [Skip],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    effects: &'a [EffectNote],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    hops: &'a [HopNote],
}

/// The record as it is read: older waypoints lack the later fields.
#[derive(Deserialize)]
#[serde(rename = "NodeExecutionRecord")]
struct RecordIn {
    node_id: NodeId,
    task_key: Option<String>,
    status: NodeStatus,
    attempt: u32,
    attempts: Vec<AttemptRecord>,
    cache_hit: bool,
    #[serde(default)]
    cache_origin: Option<std::sync::Arc<CacheOrigin>>,
    started_at: SystemTime,
    duration_ms: u64,
    #[serde(default)]
    retry_skipped: Option<RetrySkip>,
    #[serde(default)]
    spend: Option<Spend>,
    #[serde(default)]
    skips: Vec<Skip>,
    #[serde(default)]
    effects: Vec<EffectNote>,
    #[serde(default)]
    hops: Vec<HopNote>,
}

impl Serialize for NodeExecutionRecord {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        RecordOut {
            node_id: &self.node_id,
            task_key: &self.task_key,
            status: &self.status,
            attempt: self.attempt,
            attempts: &self.attempts,
            cache_hit: self.cache_hit,
            cache_origin: &self.cache_origin,
            started_at: self.started_at,
            duration_ms: self.duration_ms,
            retry_skipped: &self.retry_skipped,
            spend: self.spend(),
            skips: self.skips(),
            effects: self.effects(),
            hops: self.hops(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for NodeExecutionRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let r = RecordIn::deserialize(deserializer)?;
        Ok(NodeExecutionRecord {
            node_id: r.node_id,
            task_key: r.task_key,
            status: r.status,
            attempt: r.attempt,
            attempts: r.attempts,
            cache_hit: r.cache_hit,
            cache_origin: r.cache_origin,
            started_at: r.started_at,
            duration_ms: r.duration_ms,
            retry_skipped: r.retry_skipped,
            extras: Extras {
                spend: r.spend,
                skips: r.skips,
                effects: r.effects,
                hops: r.hops,
            }
            .boxed(),
        })
    }
}

/// A retry the engine did not schedule: its wait would have ended at or
/// after the run budget or an enclosing deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetrySkip {
    /// The attempt that did not run.
    pub attempt: u32,
    /// The wait it would have needed, in milliseconds.
    pub wait_ms: u64,
    /// The time left before the deadline, in milliseconds.
    pub remaining_ms: u64,
    /// Which deadline.
    pub bound: BudgetBound,
}

/// Which `on_error` handler compensated a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HandlerKind {
    /// `ErrorHandlerSpec::Route`: the error went into a field and the run
    /// jumped to the compensating node.
    Route {
        /// The compensating node.
        to: NodeId,
    },
    /// `ErrorHandlerSpec::Absorb`: a fallback delta was merged instead.
    Absorb,
    /// `ErrorHandlerSpec::Custom`: the registered handler decided.
    Custom {
        /// The name it is registered under.
        name: String,
    },
}

impl HandlerKind {
    /// The kind of `spec`.
    pub fn of(spec: &ErrorHandlerSpec) -> Self {
        match spec {
            ErrorHandlerSpec::Route { to, .. } => HandlerKind::Route { to: to.clone() },
            ErrorHandlerSpec::Absorb { .. } => HandlerKind::Absorb,
            ErrorHandlerSpec::Custom(name) => HandlerKind::Custom { name: name.clone() },
        }
    }

    /// `"route"`, `"absorb"` or `"custom"`, as [`ErrorHandlerSpec::kind`].
    pub fn name(&self) -> &'static str {
        match self {
            HandlerKind::Route { .. } => "route",
            HandlerKind::Absorb => "absorb",
            HandlerKind::Custom { .. } => "custom",
        }
    }
}

/// A node's final failure that its `on_error` handler compensated: the run
/// went on, but the node's record reads Failed, and this says why and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HandledFailure {
    /// The node that failed.
    pub node_id: NodeId,
    /// The task key, when it ran as a mustered task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_key: Option<String>,
    /// The superstep it failed in.
    pub superstep: u32,
    /// Its final error.
    pub error: NodeError,
    /// The handler that ran.
    pub handler: HandlerKind,
}
