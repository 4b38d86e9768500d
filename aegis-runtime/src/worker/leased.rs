//! [`LeasedStore`]: the waypoint store a worker's engine writes through.

use async_trait::async_trait;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Lease, RunQueue};
use crate::error::StoreError;
use crate::graph::EffectLedger;
use crate::share::IntoShared;
use crate::waypoint::{Waypoint, WaypointStore};

/// A waypoint store whose every write is fenced by one lease: it succeeds
/// only while the lease's epoch is still its thread's (checked by the
/// queue atomically with the write), and otherwise fails with
/// [`StoreError::LeaseLost`] having written nothing. Battalion children's
/// waypoints are fenced by their root thread's lease too.
///
/// Reads go straight to the queue's store. Each call fails after the call
/// timeout ([`LeasedStore::with_call_timeout`]; a worker pool sets its
/// [`WorkerConfig::effective_call_timeout`](super::WorkerConfig::effective_call_timeout)),
/// so a write waiting on a dark connection ends, and the run with it.
pub struct LeasedStore {
    queue: Arc<dyn RunQueue>,
    lease: Lease,
    call_timeout: Option<Duration>,
}

impl fmt::Debug for LeasedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedStore")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl LeasedStore {
    /// Writes under `lease` to `queue`'s waypoint store.
    pub fn new(queue: impl IntoShared<dyn RunQueue>, lease: Lease) -> Self {
        LeasedStore {
            queue: queue.into_shared(),
            lease,
            call_timeout: None,
        }
    }

    /// Fails each call that takes longer than `timeout`.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.call_timeout {
            None => call.await,
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                Err(StoreError::Backend(format!(
                    "thread `{}`: the waypoint store did not answer within {limit:?}",
                    self.lease.thread_id
                )))
            }),
        }
    }

    /// The lease fencing the writes.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

#[async_trait]
impl WaypointStore for LeasedStore {
    fn effect_ledger(&self) -> Option<Arc<dyn EffectLedger>> {
        self.queue.effect_ledger(&self.lease)
    }

    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        self.within(self.queue.put_fenced(&self.lease, waypoint))
            .await
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        self.within(self.queue.waypoints().latest(thread_id)).await
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        self.within(self.queue.waypoints().history(thread_id)).await
    }
}
