//! What a waypoint records of each node.

use serde::Deserialize;
use serde::Serialize;
use std::time::SystemTime;

use crate::error::NodeError;
use crate::id::NodeId;
use crate::policy::ErrorHandlerSpec;
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// that served it (no copy of its strings per hit), and pointer-sized:
    /// records move through the engine on every superstep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_skipped: Option<RetrySkip>,
    /// What the activation spent, every attempt together (a Paladin node's
    /// completions; `None` for nodes that call no model). Absent in older
    /// waypoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::policy::Spend>,
    /// Retries and fallback hops not sent, and why (a spend budget, a price
    /// ratio, a context window), in order. Absent in older waypoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skips: Vec<crate::policy::Skip>,
    /// What became of each of the node's effects (`NodeContext::effect`)
    /// in each attempt, in order. Absent in older waypoints and for nodes
    /// without effects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<crate::graph::EffectNote>,
    /// The fallback hops inside the activation's attempts (a Paladin
    /// node's chain moving from one provider to the next), in order, each
    /// with its attempt: the record of a call that succeeded after hopping
    /// says so. Absent in older waypoints and for activations that never
    /// hopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<crate::policy::hop::HopNote>,
}

impl NodeExecutionRecord {
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
    pub fn with_spend(mut self, spend: impl Into<Option<crate::policy::Spend>>) -> Self {
        self.spend = spend.into();
        self
    }

    /// Sets [`skips`](Self::skips): the retries and hops not sent.
    #[must_use]
    pub fn with_skips(mut self, skips: Vec<crate::policy::Skip>) -> Self {
        self.skips = skips;
        self
    }

    /// Sets [`hops`](Self::hops): the fallback hops inside the attempts.
    #[must_use]
    pub fn with_hops(mut self, hops: Vec<crate::policy::hop::HopNote>) -> Self {
        self.hops = hops;
        self
    }
}

impl NodeExecutionRecord {
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
            spend: None,
            skips: Vec::new(),
            effects: Vec::new(),
            hops: Vec::new(),
        }
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
