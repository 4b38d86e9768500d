use rand::Rng;
use std::time::Duration;

use super::RetryPolicy;

impl RetryPolicy {
    /// The wait before `attempt` (≥ 2) without jitter:
    /// `min(initial_interval × backoff_factor^(attempt−2), max_interval)`.
    /// Attempt 1 has no wait.
    ///
    /// ```
    /// use aegis_runtime::RetryPolicy;
    /// use std::time::Duration;
    /// let p = RetryPolicy::default();
    /// let waits: Vec<_> = (2..=5).map(|n| p.base_delay(n)).collect();
    /// assert_eq!(waits, [500, 1000, 2000, 4000].map(Duration::from_millis));
    /// ```
    pub fn base_delay(&self, attempt: u32) -> Duration {
        if attempt < 2 {
            return Duration::ZERO;
        }
        let cap = self.max_interval.as_secs_f64();
        let exp = i32::try_from(attempt - 2).unwrap_or(i32::MAX);
        let raw = self.initial_interval.as_secs_f64() * self.backoff_factor.powi(exp);
        // Compare in f64 first: an overflowing product must cap, not panic.
        if !raw.is_finite() || raw >= cap {
            self.max_interval
        } else {
            Duration::from_secs_f64(raw)
        }
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

/// `delay` plus a uniform draw from `[0, delay)`; zero stays zero.
pub fn jittered(delay: Duration, rng: &mut impl Rng) -> Duration {
    let nanos = delay.as_nanos().min(u128::from(u64::MAX)) as u64;
    if nanos == 0 {
        return delay;
    }
    delay + Duration::from_nanos(rng.random_range(0..nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn no_jitter() -> RetryPolicy {
        RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        }
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
    fn zero_interval_means_immediate_retries() {
        let p = RetryPolicy {
            initial_interval: Duration::ZERO,
            ..RetryPolicy::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        assert_eq!(p.delay_before(4, &mut rng), Duration::ZERO);
    }
}
