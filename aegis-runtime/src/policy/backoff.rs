//! Backoff delays: exponential growth, capped, with optional jitter.

use rand::Rng;
use std::time::Duration;

use super::RetryPolicy;

impl RetryPolicy {
    /// The wait before `attempt` (≥ 2) without jitter:
    /// `min(initial_interval × backoff_factor^(attempt−2), max_interval)`.
    /// Attempt 1 has no wait.
    ///
    /// ```
    /// use aegis_runtime::policy::RetryPolicy;
    /// use std::time::Duration;
    /// let p = RetryPolicy::default();
    /// let waits: Vec<_> = (2..=5).map(|n| p.base_delay(n)).collect();
    /// assert_eq!(waits, [500, 1000, 2000, 4000].map(Duration::from_millis));
    /// ```
    pub fn base_delay(&self, attempt: u32) -> Duration {
        if attempt < 2 {
            return Duration::ZERO;
        }
        // Past `Duration::MAX`, or not a number: the cap, never a panic.
        scaled(self.initial_interval, self.backoff_factor, attempt - 2)
            .map_or(self.max_interval, |d| d.min(self.max_interval))
    }

    /// The wait before `attempt`, jittered when the policy says so.
    pub fn delay_before(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let base = self.base_delay(attempt);
        if self.jitter {
            jittered(base, rng)
        } else {
            base
        }
    }
}

impl RetryPolicy {
    /// The wait before the next attempt given its `backoff` and the failed
    /// attempt's retry hint: `backoff` unless `respect_retry_after` is on,
    /// then `max(backoff, min(retry_after, max_retry_after))`.
    ///
    /// ```
    /// use aegis_runtime::policy::RetryPolicy;
    /// use std::time::Duration;
    /// let s = Duration::from_secs;
    /// let off = RetryPolicy::default();
    /// assert_eq!(off.wait_with_hint(s(1), Some(s(30))), s(1));
    /// let on = RetryPolicy::default().with_respect_retry_after(true);
    /// assert_eq!(on.wait_with_hint(s(1), Some(s(30))), s(30));
    /// assert_eq!(on.wait_with_hint(s(1), Some(s(600))), s(60)); // the cap
    /// assert_eq!(on.wait_with_hint(s(90), Some(s(600))), s(90)); // never shorter
    /// ```
    pub fn wait_with_hint(&self, backoff: Duration, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(hint) if self.respect_retry_after => backoff.max(hint.min(self.max_retry_after)),
            _ => backoff,
        }
    }
}

/// `delay` plus a uniform draw from `[0, delay)`; zero stays zero. The draw
/// is at most `u64::MAX` nanoseconds (about 584 years) and the sum
/// saturates at `Duration::MAX`.
#[doc(hidden)]
pub fn jittered(delay: Duration, rng: &mut impl Rng) -> Duration {
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return delay;
    }
    delay.saturating_add(Duration::from_nanos(rng.random_range(0..nanos)))
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// `initial × factor^exp`, or `None` when that is past `Duration::MAX` or
/// not a number. Whole factors (the default 2.0) multiply nanoseconds, so
/// the guide's waits are exact at any size; other factors go through `f64`.
fn scaled(initial: Duration, factor: f64, exp: u32) -> Option<Duration> {
    if exp == 0 || initial.is_zero() || factor == 1.0 {
        return Some(initial);
    }
    if factor.fract() == 0.0 && (2.0..=f64::from(u32::MAX)).contains(&factor) {
        // `factor` is a whole number in u32 range, so the cast is exact; a
        // factor ≥ 2 passes `Duration::MAX` within 128 steps.
        let factor = factor as u128;
        let mut nanos = initial.as_nanos();
        for _ in 0..exp {
            nanos = nanos.checked_mul(factor)?;
            if nanos / NANOS_PER_SEC > u128::from(u64::MAX) {
                return None;
            }
        }
        let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
        let sub = u32::try_from(nanos % NANOS_PER_SEC).ok()?;
        return Some(Duration::new(secs, sub));
    }
    let exp = i32::try_from(exp).unwrap_or(i32::MAX);
    let raw = initial.as_secs_f64() * factor.powi(exp);
    if raw.is_nan() {
        return None;
    }
    // A factor below 1 (refused by validation, but this is public) shrinks
    // the wait towards zero; a negative one never waits.
    if raw <= 0.0 {
        return Some(Duration::ZERO);
    }
    Duration::try_from_secs_f64(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn no_jitter() -> RetryPolicy {
        RetryPolicy::default().with_jitter(false)
    }

    #[test]
    fn defaults_give_the_documented_sequence_and_cap() {
        let p = no_jitter();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let waits: Vec<_> = (2..=5).map(|n| p.delay_before(n, &mut rng)).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000].map(Duration::from_millis));
        // 500 ms × 2^7 = 64 s > 60 s: capped.
        assert_eq!(p.base_delay(9), Duration::from_secs(60));
        assert_eq!(p.base_delay(8), Duration::from_millis(32_000));
        // Huge exponents cap instead of overflowing.
        assert_eq!(p.base_delay(u32::MAX), Duration::from_secs(60));
        assert_eq!(p.base_delay(1), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_in_delay_to_twice_delay() {
        let p = RetryPolicy::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let base = p.base_delay(3);
        let draws: Vec<_> = (0..10_000).map(|_| p.delay_before(3, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d >= base && *d < base * 2));
        // The draws actually spread over the range, not a constant.
        let lo = draws.iter().filter(|d| **d < base + base / 2).count();
        assert!((4_000..6_000).contains(&lo), "{lo}");
    }

    #[test]
    fn whole_factors_are_exact_at_any_size() {
        let p = RetryPolicy::default()
            .with_initial_interval(Duration::new(1, 1))
            .with_backoff_factor(3.0)
            .with_max_interval(Duration::MAX)
            .with_jitter(false);
        // 3^20 × (1 s + 1 ns), to the nanosecond.
        assert_eq!(p.base_delay(22), Duration::new(3_486_784_404, 486_784_401));
        // Past Duration::MAX: the cap.
        assert_eq!(p.base_delay(100), Duration::MAX);
    }

    #[test]
    fn extreme_policies_cap_instead_of_panicking() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for (initial, factor, max) in [
            (Duration::MAX, 2.0, Duration::MAX),
            (Duration::MAX, 1.5, Duration::MAX),
            (Duration::MAX, 1.0, Duration::MAX),
            (Duration::from_secs(1), f64::INFINITY, Duration::MAX),
            (Duration::from_secs(1), f64::NAN, Duration::from_secs(7)),
            (Duration::from_secs(1), -3.0, Duration::MAX),
            (Duration::from_secs(1), f64::MAX, Duration::MAX),
            (Duration::from_nanos(1), 1.000_000_1, Duration::MAX),
        ] {
            let p = RetryPolicy::default()
                .with_initial_interval(initial)
                .with_backoff_factor(factor)
                .with_max_interval(max)
                .with_jitter(true);
            for attempt in [2, 3, 64, 65, 1_000, u32::MAX] {
                let base = p.base_delay(attempt);
                assert!(base <= max, "{initial:?} {factor} {attempt}");
                let jittered = p.delay_before(attempt, &mut rng);
                assert!(jittered >= base);
            }
        }
        // NaN gives the cap; a negative factor never waits on odd powers.
        let nan = RetryPolicy::default()
            .with_backoff_factor(f64::NAN)
            .with_max_interval(Duration::from_secs(7));
        assert_eq!(nan.base_delay(3), Duration::from_secs(7));
        assert_eq!(jittered(Duration::MAX, &mut rng), Duration::MAX);
    }

    #[test]
    fn zero_interval_means_immediate_retries() {
        let p = RetryPolicy::default().with_initial_interval(Duration::ZERO);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        assert_eq!(p.delay_before(4, &mut rng), Duration::ZERO);
    }
}
