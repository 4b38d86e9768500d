//! The process's metrics observer: the points of the engine, the fallback
//! chain, the circuit breaker and the worker pool that metrics count call
//! [`observer`], which is `None` (one atomic load) until
//! `aegis::metrics::Metrics::install` sets it. Only compiled with the
//! `metrics` feature.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::TraceEvent;
use crate::id::NodeId;

/// What metrics are told. Every method must return at once (no I/O, no
/// waiting): it runs on the engine's and the worker's tasks.
pub(crate) trait Observer: Send + Sync + 'static {
    /// An event the engine emitted.
    fn event(&self, event: &TraceEvent);
    /// A cache lookup of `node_id` found an entry to serve (`hit`) or not.
    fn cache_lookup(&self, node_id: &NodeId, hit: bool);
    /// A fallback chain moved from `from` to `to`.
    fn hop(&self, from: &str, to: &str);
    /// `provider`'s circuit breaker is now in `state` (`closed`, `open`,
    /// `half_open`).
    fn breaker(&self, provider: &str, state: &'static str);
    /// A worker claimed `count` runs.
    fn claimed(&self, count: usize);
    /// A worker released a run with `outcome` (`completed`, `poisoned`, ...).
    fn released(&self, outcome: &'static str);
    /// A worker lost a run's lease and gave the run up.
    fn abandoned(&self);
    /// A lease renewal was confirmed `lag` after it was due.
    fn renewed(&self, lag: Duration);
    /// A finished span found the trace export queue full and was dropped.
    fn span_dropped(&self);
}

static OBSERVER: OnceLock<Arc<dyn Observer>> = OnceLock::new();

/// The installed observer, if any.
#[inline]
pub(crate) fn observer() -> Option<&'static dyn Observer> {
    OBSERVER.get().map(|o| &**o)
}

/// Installs `observer` for the process; the first one stays (returns
/// whether this one was installed).
pub(crate) fn install(observer: Arc<dyn Observer>) -> bool {
    OBSERVER.set(observer).is_ok()
}
