//! Bounds on one run, declared on the graph.

use std::time::Duration;

/// Bounds on one run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The run's default budget in tokens and money (a run option,
    /// `WarEngine::with_spend_budget`, wins over it). `None`: unbounded.
    pub spend_budget: Option<crate::policy::SpendBudget>,
}

impl EngineLimits {
    /// Sets [`max_supersteps`](Self::max_supersteps): the most supersteps a thread
    /// may take (`RecursionLimitExceeded`).
    #[must_use]
    pub fn with_max_supersteps(mut self, max_supersteps: u32) -> Self {
        self.max_supersteps = max_supersteps;
        self
    }

    /// Sets [`max_node_visits`](Self::max_node_visits): the most activations of one
    /// node in a thread (`NodeVisitLimitExceeded`).
    #[must_use]
    pub fn with_max_node_visits(mut self, max_node_visits: u32) -> Self {
        self.max_node_visits = max_node_visits;
        self
    }

    /// Sets [`run_timeout`](Self::run_timeout): the budget of one `start`/`resume`
    /// call (`RunTimeoutExceeded`); it nests outside every per-attempt bound.
    #[must_use]
    pub fn with_run_timeout(mut self, run_timeout: impl Into<Option<Duration>>) -> Self {
        self.run_timeout = run_timeout.into();
        self
    }

    /// Sets [`max_concurrency`](Self::max_concurrency): the most activations of one
    /// superstep running at once.
    #[must_use]
    pub fn with_max_concurrency(mut self, max_concurrency: usize) -> Self {
        self.max_concurrency = max_concurrency;
        self
    }

    /// Sets [`spend_budget`](Self::spend_budget): the run's default budget in
    /// tokens and money.
    #[must_use]
    pub fn with_spend_budget(
        mut self,
        spend_budget: impl Into<Option<crate::policy::SpendBudget>>,
    ) -> Self {
        self.spend_budget = spend_budget.into();
        self
    }

    /// Sets [`shutdown_grace`](Self::shutdown_grace): how long in-flight attempts
    /// may finish after cancellation.
    #[must_use]
    pub fn with_shutdown_grace(mut self, shutdown_grace: Duration) -> Self {
        self.shutdown_grace = shutdown_grace;
        self
    }
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
            spend_budget: None,
        }
    }
}
