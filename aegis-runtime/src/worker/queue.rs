//! The [`RunQueue`] trait: what a worker pool and a client need from the
//! coordination backend.

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use super::{
    AttemptInfo, Claim, Lease, PinnedRun, QueueStats, Release, Renewal, RunState, RunStatus,
    Submitted, Verdict, WorkerError, WorkerInfo,
};
use crate::error::StoreError;
use crate::graph::{EffectLedger, ParleyResponse};
use crate::waypoint::{Waypoint, WaypointStore};

/// Runs waiting for workers, the leases on them, and the waypoints they
/// write.
///
/// A queue owns its waypoint store, because a write under a lease must be
/// checked against the lease atomically ([`RunQueue::put_fenced`]).
/// Implementations: [`InMemoryRunQueue`](super::InMemoryRunQueue),
/// `SqliteRunQueue` (feature `sqlite`), `PostgresRunQueue` (feature
/// `postgres`).
#[async_trait]
pub trait RunQueue: Send + Sync + 'static {
    /// The waypoint store the runs write to (read-only use: every write
    /// under a lease goes through [`RunQueue::put_fenced`]).
    fn waypoints(&self) -> Arc<dyn WaypointStore>;

    /// Writes `waypoint` only if `lease` still holds its thread's current
    /// epoch, checked atomically with the write; otherwise
    /// [`StoreError::LeaseLost`] and nothing is written.
    async fn put_fenced(&self, lease: &Lease, waypoint: Waypoint) -> Result<(), StoreError>;

    /// The waypoint store's effect ledger, every write fenced by `lease`
    /// as [`RunQueue::put_fenced`] is: once the lease is lost, a write
    /// fails with [`StoreError::LeaseLost`] and records nothing. The
    /// built-in queues keep one; `None` (the default, for a queue of your
    /// own) makes every effect fail with
    /// [`EffectError::NoLedger`](crate::graph::EffectError::NoLedger).
    fn effect_ledger(&self, lease: &Lease) -> Option<Arc<dyn EffectLedger>> {
        let _ = lease;
        None
    }

    /// Queues a run of `graph_name` on `thread_id`. Idempotent per thread:
    /// a second submission of the same thread and graph changes nothing.
    async fn submit(
        &self,
        graph_name: &str,
        thread_id: &str,
        input: Value,
    ) -> Result<Submitted, WorkerError>;

    /// Records that `worker` is alive for `ttl` (a worker calls this on
    /// every heartbeat); live workers decide [`RunStatus::waiting_reason`].
    async fn register(&self, worker: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError>;

    /// Forgets a worker (graceful shutdown).
    async fn deregister(&self, worker_id: &str) -> Result<(), WorkerError>;

    /// Claims up to `max` runnable threads `worker` can run: queued ones,
    /// and running ones whose lease expired (takeover). Each claim bumps the
    /// thread's epoch and holds it for `ttl`. Oldest first; concurrent
    /// claimers never get the same thread.
    ///
    /// Which threads a worker can run: those of its graphs' names that no
    /// worker claimed yet, or pinned to the fingerprint of its graph of
    /// that name; and, when no live worker runs the fingerprint a thread is
    /// pinned to, those its graph judged compatible at the thread's epoch
    /// ([`RunQueue::record_verdict`]). Such a claim moves the thread onto
    /// the claimer's graph: it is pinned to that fingerprint from then on,
    /// and [`RunStatus`] records the move.
    async fn claim(
        &self,
        worker: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError>;

    /// Up to `max` runs of `worker`'s graphs' names that are pinned to
    /// another fingerprint and that `worker`'s graph has no verdict on at
    /// their current epoch: queued (or answered), awaiting input, or
    /// running under an expired lease. Oldest first. A worker judges each
    /// and records the verdict, so a rolling deploy costs one judgement per
    /// thread and graph, never a claim.
    async fn unjudged(
        &self,
        worker: &WorkerInfo,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError>;

    /// Records `verdict`, replacing the same graph's earlier verdict on the
    /// thread. Wakes no worker: the judging worker claims next.
    async fn record_verdict(&self, verdict: &Verdict) -> Result<(), WorkerError>;

    /// Up to `max` unfinished runs (queued, awaiting input, or running
    /// under an expired lease) pinned to `fingerprint`, or, when it is
    /// `None`, to a fingerprint no live worker of their graph runs; oldest
    /// first, each with the verdicts of its current epoch.
    async fn pinned(
        &self,
        fingerprint: Option<&str>,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError>;

    /// Extends `lease` by `ttl` from now; [`WorkerError::LeaseLost`] if it
    /// was superseded or the run left the running state.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Renewal, WorkerError>;

    /// Ends `lease` as `release` says; [`WorkerError::LeaseLost`] (nothing
    /// changed) if it was superseded.
    async fn release(&self, lease: &Lease, release: Release) -> Result<(), WorkerError>;

    /// Records that the holder of `lease` gave the run up after losing the
    /// lease (its attempt shows as `abandoned`). Changes nothing else.
    async fn abandon(&self, lease: &Lease) -> Result<(), WorkerError>;

    /// Delivers a parley answer: the thread must be awaiting input; it is
    /// queued again with the answer.
    async fn answer(&self, thread_id: &str, response: ParleyResponse) -> Result<(), WorkerError>;

    /// Puts a quarantined run back in the queue (after its rows were
    /// repaired), forgetting its fault: the next claim runs it.
    /// [`WorkerError::NotQuarantined`] if it is not quarantined.
    async fn requeue(&self, thread_id: &str) -> Result<(), WorkerError>;

    /// Up to `max` quarantined runs, oldest first, each with its fault.
    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError>;

    /// Cancels a run: a queued or waiting one at once, a running one at its
    /// holder's next heartbeat. A finished run is left as it is.
    async fn cancel(&self, thread_id: &str) -> Result<(), WorkerError>;

    /// The run's status, `None` if it was never submitted.
    async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, WorkerError>;

    /// Every claim of the thread, oldest first.
    async fn attempts(&self, thread_id: &str) -> Result<Vec<AttemptInfo>, WorkerError>;

    /// Up to `max` runs, the latest submitted first: only those in `state`
    /// and of graph `graph_name` when they are given. What an operator's
    /// view of the fleet lists. Provided for queues written before it
    /// existed: [`WorkerError::Unsupported`].
    async fn runs(
        &self,
        state: Option<RunState>,
        graph_name: Option<&str>,
        max: usize,
    ) -> Result<Vec<RunStatus>, WorkerError> {
        let _ = (state, graph_name, max);
        Err(WorkerError::Unsupported("listing runs"))
    }

    /// Ends the backoff that holds a queued run back after claims found it
    /// unreadable ([`unreadable_backoff`](super::unreadable_backoff)): the
    /// next claim takes it at once (an operator who repaired its rows need
    /// not wait). Changes nothing for a run with no backoff;
    /// [`WorkerError::UnknownThread`] if it was never submitted. Provided
    /// for queues written before it existed: [`WorkerError::Unsupported`].
    async fn retry_now(&self, thread_id: &str) -> Result<(), WorkerError> {
        let _ = thread_id;
        Err(WorkerError::Unsupported("retrying a run now"))
    }

    /// Returns when the queue may have changed (a submission, an answer, a
    /// release), or after `timeout`. Spurious wake-ups are allowed.
    async fn wait_for_change(&self, timeout: Duration);

    /// How many runs are in each state and how the claims so far ended,
    /// read at each metrics scrape. `None` from a queue that cannot tell
    /// (the default, for queues written before this method).
    async fn stats(&self) -> Result<Option<QueueStats>, WorkerError> {
        Ok(None)
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(RunQueue);
