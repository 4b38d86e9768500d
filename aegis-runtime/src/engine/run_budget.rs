//! The run's budgets: when one `start`/`resume` call runs out of time, and
//! what it may spend.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use crate::deadline::deadline_after;
use crate::error::EngineError;
use crate::graph::RunLedger;

/// When one `start`/`resume` call began and when it runs out of time
/// (`EngineLimits::run_timeout`), and what it may spend
/// (`EngineLimits::spend_budget`, `WarEngine::with_spend_budget`): the two
/// budgets of a run.
#[derive(Debug, Clone)]
pub(crate) struct RunBudget {
    started: Instant,
    /// `started` by the wall clock.
    wall: SystemTime,
    limit: Option<Duration>,
    /// The call's prices, spend budget and spend.
    spend: Arc<RunLedger>,
}

impl RunBudget {
    /// A deadline `limit` from now; none without a limit. Spends unbounded.
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        RunBudget {
            started: Instant::now(),
            wall: SystemTime::now(),
            limit,
            spend: Arc::default(),
        }
    }

    /// This run spending under `ledger`.
    pub(crate) fn with_spend(mut self, ledger: RunLedger) -> Self {
        self.spend = Arc::new(ledger);
        self
    }

    /// The run's spend ledger.
    pub(crate) fn spend(&self) -> &Arc<RunLedger> {
        &self.spend
    }

    /// Whether nothing at all is left of the run's spend budget.
    pub(crate) fn spend_exhausted(&self) -> bool {
        self.spend.exhausted()
    }

    /// The wall-clock time at `at`: the call's start by the wall clock
    /// plus the monotonic time since. Records take their times from it, so
    /// a call reads the wall clock once, not once per activation, and its
    /// records stay in the order they ran even if the wall clock is set
    /// back meanwhile (under a paused test clock they advance with it).
    pub(crate) fn wall_at(&self, at: Instant) -> SystemTime {
        self.wall
            .checked_add(at.saturating_duration_since(self.started))
            .unwrap_or_else(SystemTime::now)
    }

    /// The instant it passes; `None` without a limit, or when the limit is
    /// too far away for an `Instant` to hold (no deadline at all).
    pub(crate) fn at(&self) -> Option<Instant> {
        self.limit.and_then(|l| deadline_after(self.started, l))
    }

    /// The run's error, once the deadline has passed.
    pub(crate) fn exceeded(&self) -> Option<EngineError> {
        let limit = self.limit?;
        let elapsed = self.started.elapsed();
        (elapsed >= limit).then_some(EngineError::RunTimeoutExceeded { elapsed, limit })
    }

    /// The run's error for an activation a budget cut: its spend budget's,
    /// when that ran out and its time did not.
    pub(crate) fn error(&self) -> EngineError {
        if self.spend_exhausted() && self.exceeded().is_none() {
            return EngineError::SpendBudgetExhausted {
                spent: self.spend.spent(),
                budget: self.spend.budget().copied().unwrap_or_default(),
            };
        }
        EngineError::RunTimeoutExceeded {
            elapsed: self.started.elapsed(),
            limit: self.limit.unwrap_or_default(),
        }
    }
}
