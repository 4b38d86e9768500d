//! [`WorkerConfig`]: how a [`WorkerPool`](super::WorkerPool) runs.

use std::time::Duration;

/// How a [`WorkerPool`](super::WorkerPool) runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// This worker's id in the queue (default: host-independent random).
    pub worker_id: String,
    /// The most runs executed at once (default 8).
    pub max_runs: usize,
    /// How long a claim holds without a heartbeat (default 30 s): a worker
    /// that dies loses its threads this long after its last renewal.
    pub lease_ttl: Duration,
    /// How often leases are renewed (default a third of `lease_ttl`).
    pub heartbeat_interval: Duration,
    /// The longest wait between two claim attempts when no wake-up arrives
    /// (default 1 s): it bounds takeover latency to `lease_ttl` + this.
    pub poll_interval: Duration,
    /// How long runs get to halt durably at shutdown before the pool stops
    /// waiting for them (default 10 s).
    pub shutdown_grace: Duration,
    /// The longest the pool waits for one call to its queue (a claim, a
    /// registration, a release, a waypoint write under a lease): `None`
    /// (the default) means half of `lease_ttl`. A call past it fails, so a
    /// connection that went dark (no reset, no close) never holds a
    /// worker: its leases are given up when they run out
    /// ([`WorkerPool`](super::WorkerPool)'s lease clock) and its claim loop goes on.
    pub call_timeout: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            worker_id: format!("worker-{:016x}", rand::random::<u64>()),
            max_runs: 8,
            lease_ttl: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            call_timeout: None,
        }
    }
}

impl WorkerConfig {
    /// Sets [`WorkerConfig::worker_id`].
    pub fn with_worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// Sets [`WorkerConfig::max_runs`] (at least 1).
    pub fn with_max_runs(mut self, runs: usize) -> Self {
        self.max_runs = runs.max(1);
        self
    }

    /// Sets [`WorkerConfig::lease_ttl`] (at least 1 ms), and the heartbeat
    /// to a third of it.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(Duration::from_millis(1));
        self.heartbeat_interval = (self.lease_ttl / 3).max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::heartbeat_interval`] (at least 1 ms).
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::poll_interval`] (at least 1 ms).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::shutdown_grace`].
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets [`WorkerConfig::call_timeout`] (at least 1 ms).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The call timeout in force: [`WorkerConfig::call_timeout`], or half
    /// of `lease_ttl`.
    pub fn effective_call_timeout(&self) -> Duration {
        self.call_timeout
            .unwrap_or(self.lease_ttl / 2)
            .max(Duration::from_millis(1))
    }
}
