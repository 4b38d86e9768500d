//! The `WaypointStore` trait every backend implements, and its error.

use crate::share::IntoShared;
use async_trait::async_trait;
use std::sync::Arc;

use super::Waypoint;
use crate::error::StoreError;
use crate::graph::EffectLedger;

/// Where waypoints live.
///
/// `put` is conditional: a waypoint must carry `seq` equal to the number of
/// waypoints the thread already has, so two engines advancing one thread
/// cannot both succeed; the loser gets [`StoreError::Conflict`].
///
/// Thread ids: every built-in store checks each id with
/// [`validate_thread_id`](crate::id::validate_thread_id) before anything else
/// and refuses a bad one with [`StoreError::InvalidThreadId`] (empty,
/// longer than [`MAX_THREAD_ID_BYTES`](crate::id::MAX_THREAD_ID_BYTES) bytes,
/// or holding a NUL), on `put`, `latest` and `history` alike; any other id
/// round-trips exactly. A store of your own should do the same, so that an
/// id behaves the same on every store.
///
/// A store of your own implements these three methods and nothing else;
/// `tests/waypoint_contract.rs` holds the checks every store passes.
#[async_trait]
pub trait WaypointStore: Send + Sync + 'static {
    /// Appends a waypoint to its thread.
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError>;
    /// The thread's newest waypoint.
    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError>;
    /// Every waypoint of the thread, oldest first.
    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError>;

    /// The store's ledger of side effects
    /// ([`NodeContext::effect`](crate::graph::NodeContext::effect)), kept
    /// beside its waypoints. Every built-in store keeps one; `None` (the
    /// default, for a store of your own) makes each effect fail with
    /// [`EffectError::NoLedger`](crate::graph::EffectError::NoLedger)
    /// rather than call out unrecorded. Asked once per engine.
    fn effect_ledger(&self) -> Option<Arc<dyn EffectLedger>> {
        None
    }
}

/// A store by value, or an `Arc` of it (the store is generic on the
/// engine, so no `dyn` here).
impl<S: WaypointStore> IntoShared<S> for S {
    fn into_shared(self) -> Arc<S> {
        Arc::new(self)
    }
}

impl<S: WaypointStore> IntoShared<S> for Arc<S> {
    fn into_shared(self) -> Arc<S> {
        self
    }
}
