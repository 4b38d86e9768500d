//! [`LeasedStore`]: the waypoint store a worker's engine writes through.

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

use super::{Lease, RunQueue};
use crate::error::StoreError;
use crate::waypoint::{Waypoint, WaypointStore};

/// A waypoint store whose every write is fenced by one lease: it succeeds
/// only while the lease's epoch is still its thread's (checked by the
/// queue atomically with the write), and otherwise fails with
/// [`StoreError::LeaseLost`] having written nothing. Battalion children's
/// waypoints are fenced by their root thread's lease too.
///
/// Reads go straight to the queue's store.
pub struct LeasedStore {
    queue: Arc<dyn RunQueue>,
    lease: Lease,
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
    pub fn new(queue: Arc<dyn RunQueue>, lease: Lease) -> Self {
        LeasedStore { queue, lease }
    }

    /// The lease fencing the writes.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

#[async_trait]
impl WaypointStore for LeasedStore {
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        self.queue.put_fenced(&self.lease, waypoint).await
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        self.queue.waypoints().latest(thread_id).await
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        self.queue.waypoints().history(thread_id).await
    }
}
