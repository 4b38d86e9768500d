use async_trait::async_trait;

use super::Waypoint;

/// Why a store refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The write was conditional on the thread's last waypoint, and another
    /// writer got there first.
    #[error(
        "thread `{thread_id}`: expected to write waypoint #{expected_seq}, but the thread is at #{actual_next}"
    )]
    Conflict {
        /// The thread.
        thread_id: String,
        /// The sequence number the writer tried.
        expected_seq: u64,
        /// The sequence number the store expected.
        actual_next: u64,
    },
    /// The backend failed.
    #[error("{0}")]
    Backend(String),
}

/// Where waypoints live.
///
/// `put` is conditional: a waypoint must carry `seq` equal to the number of
/// waypoints the thread already has, so two engines advancing one thread
/// cannot both succeed; the loser gets [`StoreError::Conflict`].
#[async_trait]
pub trait WaypointStore: Send + Sync + 'static {
    /// Appends a waypoint to its thread.
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError>;
    /// The thread's newest waypoint.
    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError>;
    /// Every waypoint of the thread, oldest first.
    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError>;
}
