//! Errors of the waypoint stores.

use crate::id::ThreadIdError;

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
    /// The write was fenced by a worker lease (see `aegis::worker`) and the
    /// lease now belongs to a later claim: the writer lost the thread
    /// (paused, partitioned, too slow to renew) and nothing was written.
    #[error(
        "thread `{thread_id}`: lease epoch {epoch} was superseded by epoch {current}; nothing was written"
    )]
    LeaseLost {
        /// The thread whose lease was lost.
        thread_id: String,
        /// The writer's lease epoch (its fencing token).
        epoch: u64,
        /// The thread's current epoch.
        current: u64,
    },
    /// The backend failed.
    #[error("{0}")]
    Backend(String),
    /// The thread id is one no store can hold (see
    /// [`validate_thread_id`](crate::id::validate_thread_id)); nothing was read
    /// or written. Every built-in store refuses the same ids the same way.
    #[error("{0}")]
    InvalidThreadId(ThreadIdError),
    /// The store was created by a newer version of aegis. Nothing was
    /// changed: an older build never rewrites a newer store.
    #[error(
        "the waypoint store has schema version {found}, but this build of aegis supports up to version {supported}; upgrade aegis to open it (the store was left untouched)"
    )]
    SchemaTooNew {
        /// The store's schema version.
        found: u32,
        /// The newest schema version this build knows.
        supported: u32,
    },
    /// A stored waypoint was written in a newer serialization format.
    #[error(
        "thread `{thread_id}`: waypoint #{seq} is in waypoint format {found}, but this build of aegis reads up to format {supported}; upgrade aegis to read it"
    )]
    UnsupportedFormat {
        /// The thread.
        thread_id: String,
        /// The waypoint's sequence number.
        seq: u64,
        /// The waypoint's format version.
        found: u32,
        /// The newest format version this build reads.
        supported: u32,
    },
    /// A stored waypoint cannot be decoded.
    #[error("thread `{thread_id}`: waypoint #{seq} is unreadable: {message}")]
    Corrupt {
        /// The thread.
        thread_id: String,
        /// The waypoint's sequence number.
        seq: u64,
        /// What is wrong with it.
        message: String,
    },
}
