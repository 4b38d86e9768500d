//! What the worker fleet's operations can fail with.

use crate::error::EngineError;
use crate::error::StoreError;

/// Why a run-queue, worker or client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The caller's lease on the thread was superseded by a later claim
    /// (its epoch is no longer the thread's), or the thread left the state
    /// the lease was for: the caller must abandon the run and write
    /// nothing more.
    #[error("thread `{thread_id}`: lease epoch {epoch} is no longer held; the run was abandoned")]
    LeaseLost {
        /// The thread.
        thread_id: String,
        /// The caller's (stale) epoch.
        epoch: u64,
    },
    /// No run was ever submitted under this thread id.
    #[error("thread `{thread_id}` was never submitted")]
    UnknownThread {
        /// The thread.
        thread_id: String,
    },
    /// A thread id is already taken by a run of another graph.
    #[error("thread `{thread_id}` was submitted for graph `{existing}`, not `{requested}`")]
    GraphConflict {
        /// The thread.
        thread_id: String,
        /// The graph it was submitted for.
        existing: String,
        /// The graph this call named.
        requested: String,
    },
    /// A parley answer for a thread that is not waiting for one.
    #[error("thread `{thread_id}` is not awaiting input (it is {state})")]
    NotAwaitingInput {
        /// The thread.
        thread_id: String,
        /// The state it is in.
        state: String,
    },
    /// [`Client::requeue`](super::Client::requeue) of a run that is not
    /// quarantined.
    #[error("thread `{thread_id}` is not quarantined (it is {state})")]
    NotQuarantined {
        /// The thread.
        thread_id: String,
        /// The state it is in.
        state: String,
    },
    /// A run input that is not a JSON object, or a graph name that is
    /// empty.
    #[error("invalid submission: {0}")]
    InvalidSubmission(String),
    /// Waiting for a thread's outcome took longer than the caller allowed.
    #[error("thread `{thread_id}` did not finish within {waited_ms} ms")]
    WaitTimedOut {
        /// The thread.
        thread_id: String,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// The waypoint store or the queue's backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine refused a run (a graph that fails validation, ...).
    #[error(transparent)]
    Engine(Box<EngineError>),
    /// Two graphs registered under one name, or a worker with no graph.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The queue does not implement this operation (a [`RunQueue`](super::RunQueue)
    /// written before the operation existed).
    #[error("this run queue does not support {0}")]
    Unsupported(&'static str),
    /// The SIGTERM / SIGINT handlers could not be installed (see
    /// [`shutdown_signal`](super::shutdown_signal)).
    #[error("cannot listen for shutdown signals: {0}")]
    Signal(String),
}

impl From<EngineError> for WorkerError {
    fn from(e: EngineError) -> Self {
        WorkerError::Engine(Box::new(e))
    }
}
