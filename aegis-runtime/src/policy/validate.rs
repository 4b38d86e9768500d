//! Policy checks that need nothing but the policy itself.

use super::{RetryPolicy, TimeoutPolicy};

/// Everything wrong with a retry policy, for humans.
pub(crate) fn retry_problems(p: &RetryPolicy) -> Vec<String> {
    let mut out = Vec::new();
    if p.max_attempts == 0 {
        out.push(
            "max_attempts is 0 (it counts attempts including the first; use 1 for no retries)"
                .to_string(),
        );
    }
    if !p.backoff_factor.is_finite() || p.backoff_factor < 1.0 {
        out.push(format!(
            "backoff_factor {} must be a finite number of at least 1.0",
            p.backoff_factor
        ));
    }
    if p.initial_interval > p.max_interval {
        out.push(format!(
            "initial_interval {:?} is greater than max_interval {:?}",
            p.initial_interval, p.max_interval
        ));
    }
    if p.respect_retry_after && p.max_retry_after.is_zero() {
        out.push(
            "max_retry_after is zero with respect_retry_after on (no hint could ever be honoured)"
                .to_string(),
        );
    }
    if let super::RetryPredicate::Custom(name) = &p.retry_on
        && name.trim().is_empty()
    {
        out.push("retry_on names an empty custom predicate".to_string());
    }
    out
}

/// Everything wrong with a timeout policy, for humans.
pub(crate) fn timeout_problems(p: &TimeoutPolicy) -> Vec<String> {
    let mut out = Vec::new();
    if p.run_timeout.is_some_and(|d| d.is_zero()) {
        out.push("run_timeout is zero".to_string());
    }
    if p.idle_timeout.is_some_and(|d| d.is_zero()) {
        out.push("idle_timeout is zero".to_string());
    }
    if p.first_chunk.is_some_and(|d| d.is_zero()) {
        out.push("first_chunk is zero".to_string());
    }
    if let (Some(first), Some(run)) = (p.first_chunk, p.run_timeout)
        && first >= run
    {
        out.push(format!(
            "first_chunk {first:?} is not shorter than run_timeout {run:?}: the run timeout would always cut first, so no provider would ever be hopped"
        ));
    }
    out
}
