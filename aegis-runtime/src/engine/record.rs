//! What a waypoint records of each node.

use serde::Deserialize;
use serde::Serialize;
use std::time::SystemTime;

use crate::error::NodeError;
use crate::graph::NodeId;

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
pub struct AttemptRecord {
    /// The attempt, 1-based.
    pub attempt: u32,
    /// When it started.
    pub started_at: SystemTime,
    /// How long it ran.
    pub duration_ms: u64,
    /// How it failed.
    pub error: NodeError,
}

/// One node activation in one superstep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// When the activation started.
    pub started_at: SystemTime,
    /// How long the activation took, backoff waits included.
    pub duration_ms: u64,
}
