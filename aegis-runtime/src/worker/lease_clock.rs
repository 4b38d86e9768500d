//! A run's heartbeat, and the worker's own count of its lease.
//!
//! The queue's clock decides when a lease expires for everyone else; the
//! worker cannot read it when the connection went dark (no reset, no
//! close: a switch failure, a firewall change), so it keeps its own: the
//! lease holds until the time its last successful renewal (or the claim)
//! was *sent*, plus `lease_ttl`. That is never later than the queue's own
//! expiry, so the worker gives a run up no later than another worker may
//! take it over. A renewal that has not succeeded by then has failed,
//! whatever it is still waiting for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Lease, RunQueue, WorkerError};

/// How a run's heartbeat ended it, if it did.
#[derive(Debug, Default)]
pub(super) struct LeaseEnd {
    /// Cancelled when the lease is lost: refused by the queue, or run out
    /// on the worker's own clock. The run is dropped at once (its nodes
    /// stop calling out), not halted: nothing it writes would land.
    pub(super) lost: CancellationToken,
    /// Someone asked to cancel the run: it halts, and is released as
    /// cancelled.
    pub(super) cancel_requested: AtomicBool,
}

impl LeaseEnd {
    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    pub(super) fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }
}

/// Renews `lease` every `interval` until `run` is cancelled, counting the
/// lease's time from `sent` (when the claim was asked for). On a cancel
/// request, cancels `run` (the engine halts); on a lost lease, cancels
/// `end.lost` as well.
pub(super) async fn heartbeat(
    queue: Arc<dyn RunQueue>,
    lease: Lease,
    ttl: Duration,
    interval: Duration,
    sent: Instant,
    run: CancellationToken,
    end: Arc<LeaseEnd>,
) {
    let mut valid_until = sent.checked_add(ttl);
    let lost = |why: &str| {
        tracing::warn!(
            thread_id = %lease.thread_id,
            epoch = lease.epoch,
            "aegis worker: lease lost ({why}); giving the run up"
        );
        end.lost.cancel();
        run.cancel();
    };
    loop {
        let now = Instant::now();
        let beat = now.checked_add(interval);
        let wake = match (beat, valid_until) {
            (Some(b), Some(v)) => Some(b.min(v)),
            (b, v) => b.or(v),
        };
        tokio::select! {
            _ = run.cancelled() => return,
            _ = sleep_until(wake) => {}
        }
        let sent = Instant::now();
        let left = match valid_until {
            Some(v) if v <= sent => {
                lost("not renewed within lease_ttl");
                return;
            }
            Some(v) => v - sent,
            None => Duration::MAX,
        };
        match tokio::time::timeout(left, queue.renew(&lease, ttl)).await {
            Ok(Ok(renewal)) => {
                valid_until = sent.checked_add(ttl);
                #[cfg(feature = "metrics")]
                if let Some(observer) = crate::trace::observe::observer() {
                    let due = wake.unwrap_or(sent);
                    observer.renewed(Instant::now().saturating_duration_since(due));
                }
                if renewal.cancel_requested {
                    end.cancel_requested.store(true, Ordering::SeqCst);
                    run.cancel();
                    return;
                }
            }
            Ok(Err(WorkerError::LeaseLost { .. })) => {
                lost("superseded");
                return;
            }
            // The lease holds until `valid_until`: the next beat (or the
            // deadline) comes first.
            Ok(Err(e)) => {
                tracing::warn!(error = %e, thread_id = %lease.thread_id, "aegis worker: lease renewal failed")
            }
            Err(_) => {
                lost("no answer to the renewal before the lease ran out");
                return;
            }
        }
    }
}

/// Sleeps until `at`, or forever when it is beyond the clock.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
