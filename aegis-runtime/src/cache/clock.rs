//! The wall clock cache expiry is judged by.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The wall clock node cache entries expire by.
///
/// Entries carry an absolute [`SystemTime`] expiry, because a shared backend
/// (Redis) outlives the process that wrote them. Reading `SystemTime::now()`
/// directly would make TTL untestable, so a `CacheClock` reads the wall clock
/// ONCE, when it is made, and advances from there by
/// [`tokio::time::Instant`]: on tokio's paused test clock,
/// `tokio::time::advance(ttl)` moves it by exactly `ttl`. It is also
/// monotonic, whatever happens to the system clock meanwhile.
///
/// Clones share their anchor. A backend and the engine that re-checks its
/// hits should read the same clock: [`NodeCacheHandle`](super::NodeCacheHandle)
/// adopts its backend's ([`NodeCache::clock`](super::NodeCache::clock)).
///
/// [`CacheClock::manual`] is a clock that moves only when told, for tests
/// that cannot pause tokio's clock (a real Redis connection's timeouts would
/// fire at once on a paused clock).
#[derive(Clone)]
pub struct CacheClock(Source);

#[derive(Clone)]
enum Source {
    Anchored {
        system: SystemTime,
        instant: Instant,
    },
    Manual(ManualClock),
}

impl CacheClock {
    /// A clock anchored to the wall clock now.
    pub fn new() -> Self {
        CacheClock(Source::Anchored {
            system: SystemTime::now(),
            instant: Instant::now(),
        })
    }

    /// A clock that stands at whatever `manual` is set to.
    pub fn manual(manual: &ManualClock) -> Self {
        CacheClock(Source::Manual(manual.clone()))
    }

    /// The current time by this clock.
    pub fn now(&self) -> SystemTime {
        self.at(Instant::now())
    }

    /// The time at `instant` (one the caller read already; a manual clock
    /// reads its own time whatever the instant).
    pub(crate) fn at(&self, at: Instant) -> SystemTime {
        match &self.0 {
            Source::Anchored { system, instant } => {
                // The elapsed time is bounded by the process's life, far from
                // overflowing a SystemTime.
                system
                    .checked_add(at.saturating_duration_since(*instant))
                    .unwrap_or(*system)
            }
            Source::Manual(m) => m.now(),
        }
    }
}

impl Default for CacheClock {
    fn default() -> Self {
        CacheClock::new()
    }
}

impl fmt::Debug for CacheClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.0 {
            Source::Anchored { .. } => "anchored",
            Source::Manual(_) => "manual",
        };
        f.debug_struct("CacheClock")
            .field("kind", &kind)
            .field("now", &self.now())
            .finish()
    }
}

/// A time that moves only when told: the source of [`CacheClock::manual`].
///
/// Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<SystemTime>>);

impl ManualClock {
    /// A manual time standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// The time it stands at.
    pub fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the time forward by `by` (saturating far in the future).
    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *t = t.checked_add(by).unwrap_or(*t);
    }

    /// A [`CacheClock`] reading this time.
    pub fn clock(&self) -> CacheClock {
        CacheClock::manual(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_anchored_clock_moves_exactly_with_the_paused_tokio_clock() {
        let clock = CacheClock::new();
        let t0 = clock.now();
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(
            clock.now().duration_since(t0).unwrap(),
            Duration::from_millis(1500)
        );
        // A clone shares the anchor.
        let clone = clock.clone();
        assert_eq!(clone.now(), clock.now());
        // Time stands still while the paused clock does.
        assert_eq!(clock.now(), clock.now());
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let manual = ManualClock::new(start);
        let clock = manual.clock();
        assert_eq!(clock.now(), start);
        manual.advance(Duration::from_secs(5));
        assert_eq!(clock.now(), start + Duration::from_secs(5));
        assert!(format!("{clock:?}").contains("manual"));
    }
}
