//! Bounds on one run, declared on the graph.

use std::time::Duration;

/// Bounds on one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineLimits {
    /// The most supersteps a thread may take (`RecursionLimitExceeded`).
    pub max_supersteps: u32,
    /// The most activations of one node in a thread (`NodeVisitLimitExceeded`).
    pub max_node_visits: u32,
    /// The budget of one `start`/`resume` call (`RunTimeoutExceeded`); it
    /// nests outside every per-attempt bound. `None`: unbounded.
    pub run_timeout: Option<Duration>,
    /// The most activations of one superstep running at once.
    pub max_concurrency: usize,
    /// How long in-flight attempts may finish after cancellation.
    pub shutdown_grace: Duration,
}

impl Default for EngineLimits {
    /// 1,000 supersteps, 100 visits per node, no run timeout, 64 concurrent
    /// activations, 5 s shutdown grace.
    fn default() -> Self {
        EngineLimits {
            max_supersteps: 1_000,
            max_node_visits: 100,
            run_timeout: None,
            max_concurrency: 64,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}
