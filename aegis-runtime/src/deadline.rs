//! Deadlines from durations a user chose. Every `Duration` the API accepts
//! is legal, `Duration::MAX` included, so `Instant + Duration` is checked:
//! a bound too far away for an `Instant` to hold is no bound at all.

use std::time::Duration;
use tokio::time::Instant;

/// `from + after`, or `None` ("no deadline") when the sum does not fit in
/// an `Instant`.
pub(crate) fn deadline_after(from: Instant, after: Duration) -> Option<Instant> {
    from.checked_add(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn representable_bounds_add_and_unrepresentable_ones_vanish() {
        let now = Instant::now();
        assert_eq!(
            deadline_after(now, Duration::from_secs(1)),
            Some(now + Duration::from_secs(1))
        );
        assert_eq!(deadline_after(now, Duration::MAX), None);
        assert_eq!(deadline_after(now, Duration::from_secs(u64::MAX)), None);
    }
}
