//! The retry rule: whether a failed attempt is retried, the backoff before
//! the next one (seeded jitter when the engine has a seed), and the wait,
//! which races cancellation and the run deadline. With `respect_retry_after`
//! the failure's typed retry hint is a floor under the backoff (capped). A
//! wait that would end at or after the run budget or the enclosing deadline
//! is not begun: the node fails at once, so its handler has the time left.

use rand::SeedableRng;
use rand::rngs::StdRng;
use std::hash::Hasher;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

use super::activation::ActivationCtx;
use super::deadline::sleep_opt;
use super::record::{Recorder, millis};
use crate::deadline::deadline_after;
use crate::engine::kit::Kit;
use crate::engine::run_budget::RunBudget;
use crate::error::{NodeError, NodeErrorSource, TimeoutKind};
use crate::fnv::Fnv;
use crate::id::NodeId;
use crate::policy::{RetryPolicy, RetryPredicate, SkipReason, SkippedStep};
use crate::trace::{BudgetBound, TraceEvent};
use crate::waypoint::RetrySkip;

/// What follows a failed attempt.
pub(super) enum AfterFailure {
    /// The backoff elapsed: run the next attempt.
    Retry,
    /// Cancelled during the backoff.
    Shutdown,
    /// No retry: the attempt's error is the activation's final failure.
    GiveUp {
        /// The run deadline passed (the attempt was cut by it, or it fell
        /// during the backoff).
        budget_exhausted: bool,
    },
}

impl Kit {
    /// Decides on a retry after `attempt` failed with `error` and, if there
    /// is one that fits the budget, waits out its backoff.
    pub(super) async fn next_attempt(
        &self,
        act: &ActivationCtx<'_>,
        node_id: &NodeId,
        error: &NodeError,
        attempt: u32,
        rec: &mut Recorder<'_>,
        span: &tracing::Span,
    ) -> AfterFailure {
        // A run-deadline cut is never retried; a run with nothing left to
        // spend is out of budget too (no handler runs).
        let spend_out = act.run_budget.spend_exhausted();
        let budget_cut = error.source == NodeErrorSource::Timeout(TimeoutKind::EngineRun);
        let policy = match &act.aegis.retry {
            Some(policy) if !budget_cut && attempt < policy.max_attempts.max(1) => policy,
            _ => {
                return AfterFailure::GiveUp {
                    budget_exhausted: budget_cut || spend_out,
                };
            }
        };
        let next = attempt.saturating_add(1);
        if !self.retry_allowed(policy, error, next).await {
            return AfterFailure::GiveUp {
                budget_exhausted: spend_out,
            };
        }
        // The RNG must not live across an await: it is not Send.
        let delay = match self.jitter_seed {
            Some(seed) => {
                let key = jitter_key(seed, act, node_id, next);
                policy.delay_before(next, &mut StdRng::seed_from_u64(key))
            }
            None => policy.delay_before(next, &mut rand::rng()),
        };
        let delay = policy.wait_with_hint(delay, error.retry_after);
        // The failed attempt's span says what comes next: the wait (the
        // backoff, floored by a Retry-After hint the policy respects), or
        // why there is no retry.
        if !span.is_disabled() {
            span.record("retry_delay_ms", millis(delay));
            if let Some(hint) = error.retry_after.filter(|_| policy.respect_retry_after) {
                span.record("retry_after_ms", millis(hint));
            }
        }
        if let Some(skip) = self.budget_skip(act, delay) {
            if !span.is_disabled() {
                span.record("retry_skipped", tracing::field::display(skip.bound));
                span.record("retry_remaining_ms", millis(skip.remaining));
            }
            self.emit(TraceEvent::RetrySkipped {
                thread_id: act.thread_id.to_string(),
                superstep: act.superstep,
                node_id: node_id.clone(),
                task_key: act.task.map(|t| t.task_key.clone()),
                attempt: next,
                wait: delay,
                remaining: skip.remaining,
                bound: skip.bound,
            });
            rec.retry_skipped(RetrySkip {
                attempt: next,
                wait_ms: millis(delay),
                remaining_ms: millis(skip.remaining),
                bound: skip.bound,
            });
            // With no time left at all the run is out of budget (no handler);
            // otherwise the handler compensates in what is left.
            return AfterFailure::GiveUp {
                budget_exhausted: skip.remaining.is_zero() && skip.bound == BudgetBound::RunBudget,
            };
        }
        if let Some(skip) = spend_skip(act, rec, next) {
            self.emit(TraceEvent::StepSkipped {
                thread_id: Some(act.thread_id.to_string()),
                superstep: Some(act.superstep),
                node_id: Some(node_id.clone()),
                task_key: act.task.map(|t| t.task_key.clone()),
                skip: skip.clone(),
            });
            rec.skipped(skip);
            // With nothing left of the run's budget the run is out of it (no
            // handler); otherwise the handler compensates in what is left.
            return AfterFailure::GiveUp {
                budget_exhausted: spend_out,
            };
        }
        self.emit(match act.task {
            Some(task) => TraceEvent::TaskRetryScheduled {
                thread_id: act.thread_id.to_string(),
                superstep: act.superstep,
                node_id: node_id.clone(),
                task_key: task.task_key.clone(),
                attempt: next,
                delay,
            },
            None => TraceEvent::RetryScheduled {
                thread_id: act.thread_id.to_string(),
                superstep: act.superstep,
                node_id: node_id.clone(),
                attempt: next,
                delay,
            },
        });
        let span = tracing::debug_span!("aegis.backoff", attempt = next, delay_ms = millis(delay));
        if span.is_disabled() {
            return self.backoff(delay, act.run_budget).await;
        }
        self.backoff(delay, act.run_budget).instrument(span).await
    }

    /// The deadline a wait of `delay` starting now would reach or overrun,
    /// if any: the earlier of the run budget and the enclosing deadline.
    /// A zero wait fits while any time is left.
    fn budget_skip(&self, act: &ActivationCtx<'_>, delay: Duration) -> Option<Skip> {
        let now = Instant::now();
        let bound = match (act.run_budget.at(), self.enclosing_deadline) {
            (Some(r), Some(e)) if e < r => (e, BudgetBound::EnclosingDeadline),
            (Some(r), _) => (r, BudgetBound::RunBudget),
            (None, Some(e)) => (e, BudgetBound::EnclosingDeadline),
            (None, None) => return None,
        };
        let remaining = bound.0.saturating_duration_since(now);
        (delay >= remaining).then_some(Skip {
            remaining,
            bound: bound.1,
        })
    }

    /// Whether `policy` retries `err` with attempt `next`.
    async fn retry_allowed(&self, policy: &RetryPolicy, err: &NodeError, next: u32) -> bool {
        if let Some(allowed) = policy.retry_on.allows_builtin(err.transience) {
            return allowed;
        }
        let RetryPredicate::Custom(name) = &policy.retry_on else {
            return false;
        };
        // Registration is checked at start/resume; a miss here cannot happen.
        let Some(predicate) = self.retry_predicates.get(name) else {
            return false;
        };
        match predicate.allows(err, next).await {
            Ok(allowed) => allowed,
            Err(e) => {
                tracing::warn!(predicate = %name, node_id = %err.node_id, error = %e,
                    "retry predicate failed; not retrying");
                false
            }
        }
    }

    /// Waits `delay` before the next attempt, racing cancellation and the run
    /// deadline. A zero delay never touches the timer (a `sleep(0)` would
    /// wait for the next timer tick).
    async fn backoff(&self, delay: Duration, run_budget: &RunBudget) -> AfterFailure {
        if delay.is_zero() {
            return if self.cancellation().is_cancelled() {
                AfterFailure::Shutdown
            } else {
                AfterFailure::Retry
            };
        }
        // A wait too long for an `Instant` ends only by cancellation or
        // with the run deadline.
        let end = deadline_after(Instant::now(), delay);
        let (until, deadline_first) = match (run_budget.at(), end) {
            (Some(d), Some(e)) if d <= e => (Some(d), true),
            (Some(d), None) => (Some(d), true),
            (_, e) => (e, false),
        };
        tokio::select! {
            biased;
            _ = self.cancellation().cancelled() => AfterFailure::Shutdown,
            _ = sleep_opt(until) => {
                if deadline_first {
                    AfterFailure::GiveUp { budget_exhausted: true }
                } else {
                    AfterFailure::Retry
                }
            }
        }
    }
}

/// The retry `next` skipped for spend, if its expected spend (what the
/// attempt before it spent, or when it spent nothing what its first request
/// was expected to) would pass what is left of the run's budget or the
/// node's cap. A retry expected to spend nothing fits while anything is
/// left.
fn spend_skip(
    act: &ActivationCtx<'_>,
    rec: &Recorder<'_>,
    next: u32,
) -> Option<crate::policy::Skip> {
    let remaining = act
        .run_budget
        .spend()
        .remaining_under(act.aegis.spend_cap.as_ref(), &rec.spent())?;
    let expected = rec.expected_spend();
    (!remaining.fits(&expected)).then(|| {
        crate::policy::Skip::new(
            SkippedStep::Retry { attempt: next },
            SkipReason::SpendBudget {
                expected,
                remaining,
            },
        )
    })
}

/// A retry [`Kit::budget_skip`] refused: the time left and to what.
struct Skip {
    remaining: Duration,
    bound: BudgetBound,
}

/// A seeded attempt's jitter key: FNV-1a over its identity, so the same
/// attempt of the same thread always draws the same jitter (a std
/// `Hasher` is not promised to be stable across Rust releases).
fn jitter_key(seed: u64, act: &ActivationCtx<'_>, node_id: &NodeId, attempt: u32) -> u64 {
    Fnv::seeded(seed)
        .field(act.thread_id.as_bytes())
        .field(node_id.as_str().as_bytes())
        .field(act.task.map_or(&[][..], |t| t.task_key.as_bytes()))
        .field(&act.superstep.to_le_bytes())
        .field(&attempt.to_le_bytes())
        .finish()
}
