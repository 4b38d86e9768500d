//! The run deadline: when one `start`/`resume` call runs out of time.

use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use crate::deadline::deadline_after;
use crate::error::EngineError;

/// When one `start`/`resume` call began and when it runs out of time
/// (`EngineLimits::run_timeout`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunDeadline {
    started: Instant,
    /// `started` by the wall clock.
    wall: SystemTime,
    limit: Option<Duration>,
}

impl RunDeadline {
    /// A deadline `limit` from now; none without a limit.
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        RunDeadline {
            started: Instant::now(),
            wall: SystemTime::now(),
            limit,
        }
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

    /// The run's error for an activation the deadline cut.
    pub(crate) fn error(&self) -> EngineError {
        EngineError::RunTimeoutExceeded {
            elapsed: self.started.elapsed(),
            limit: self.limit.unwrap_or_default(),
        }
    }
}
