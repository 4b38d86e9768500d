//! The worker fleet: a run queue, leases with fencing tokens, automatic
//! takeover, and parley delivery from any process.
//!
//! A [`Client`] submits runs (idempotent per thread), answers parleys,
//! cancels and waits; [`WorkerPool`]s in any number of processes claim the
//! runs whose graph they registered, each claim a [`Lease`] with a strictly
//! increasing epoch (the fencing token), renewed by heartbeat. Every
//! waypoint a worker writes goes through a [`LeasedStore`]: it is written
//! only if the lease is still the thread's, checked atomically with the
//! write, so a worker that was paused past its lease and wakes up writes
//! nothing ([`StoreError::LeaseLost`]) and
//! abandons the run. A lease that is not renewed expires, and another
//! worker takes the thread over from its last waypoint.
//!
//! Queues: [`InMemoryRunQueue`] (one process), `SqliteRunQueue` (feature
//! `sqlite`: one process, durable), `PostgresRunQueue` (feature `postgres`:
//! a fleet of processes, `FOR UPDATE SKIP LOCKED` claims and
//! `LISTEN`/`NOTIFY` wake-ups).
//!
//! A worker process stops gracefully on SIGTERM / SIGINT with
//! [`WorkerPool::run_until_signal`] (or [`shutdown_signal`]'s token passed
//! to [`WorkerPool::run`]): its runs halt durably within
//! [`WorkerConfig::shutdown_grace`] and their leases are released.

mod call;
mod client;
mod config;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod epoch_column;
mod error;
mod judge;
mod lease_clock;
mod leased;
mod memory;
mod pool;
mod queue;
mod signal;
mod types;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use client::Client;
pub use config::WorkerConfig;
pub use error::WorkerError;
pub use leased::LeasedStore;
pub use memory::InMemoryRunQueue;
pub use pool::{EngineFactory, WorkerPool};
pub use queue::RunQueue;
pub use signal::shutdown_signal;
pub use types::{
    AttemptInfo, Claim, GraphKey, Lease, MAX_UNREADABLE_CLAIMS, PinnedRun, QueueStats, Release,
    Renewal, RunFault, RunState, RunStatus, Submitted, Verdict, WorkerInfo, unreadable_backoff,
};

#[cfg(feature = "postgres")]
pub use postgres::PostgresRunQueue;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteRunQueue;

use crate::error::StoreError;
use crate::id::validate_root_thread_id;

/// Wakes every task in `wait_for_change`, and leaves a permit for the next
/// one: a worker that looked at the queue just before the change and is
/// about to wait must not sleep through it (a spurious wake-up is allowed).
fn wake(changed: &tokio::sync::Notify) {
    changed.notify_waiters();
    changed.notify_one();
}

/// The outcome of an update a queue makes only in one state: `done`; the
/// thread never submitted (no `state`); or in another state, which `wrong`
/// turns into the caller's error.
fn state_checked(
    done: bool,
    state: Option<String>,
    thread_id: &str,
    wrong: fn(String, String) -> WorkerError,
) -> Result<(), WorkerError> {
    match (done, state) {
        (true, _) => Ok(()),
        (false, None) => Err(WorkerError::UnknownThread {
            thread_id: thread_id.to_string(),
        }),
        (false, Some(state)) => Err(wrong(thread_id.to_string(), state)),
    }
}

/// Checks a submission before any queue stores it.
fn validate_submission(
    graph_name: &str,
    thread_id: &str,
    input: &serde_json::Value,
) -> Result<(), WorkerError> {
    validate_root_thread_id(thread_id)
        .map_err(|e| WorkerError::Store(StoreError::InvalidThreadId(e)))?;
    if graph_name.is_empty() {
        return Err(WorkerError::InvalidSubmission(
            "the graph name is empty".to_string(),
        ));
    }
    if !input.is_object() {
        return Err(WorkerError::InvalidSubmission(format!(
            "thread `{thread_id}`: the input must be a JSON object"
        )));
    }
    Ok(())
}

/// A second submission of a thread: the same graph is a no-op, another
/// graph is refused.
fn existing_submission(
    thread_id: &str,
    existing: &str,
    requested: &str,
) -> Result<Submitted, WorkerError> {
    if existing == requested {
        Ok(Submitted::Existing)
    } else {
        Err(WorkerError::GraphConflict {
            thread_id: thread_id.to_string(),
            existing: existing.to_string(),
            requested: requested.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
