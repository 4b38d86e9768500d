//! [`Client`]: submits runs and talks to them from any process.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{AttemptInfo, PinnedRun, RunQueue, RunState, RunStatus, Submitted, WorkerError};
use crate::graph::{EffectEntry, ParleyResponse};
use crate::share::IntoShared;
use crate::waypoint::Waypoint;

/// The caller's side of a worker fleet: submit runs, answer their parleys,
/// cancel them, read their status and wait for their outcome. Needs no
/// graph: any process with the queue can be a client.
#[derive(Clone)]
pub struct Client {
    queue: Arc<dyn RunQueue>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A client of `queue`.
    /// `queue` is the queue itself, or an `Arc` of it (see
    /// [`IntoShared`](crate::engine::IntoShared)).
    pub fn new(queue: impl IntoShared<dyn RunQueue>) -> Self {
        Client {
            queue: queue.into_shared(),
        }
    }

    /// Queues a run of the graph registered as `graph_name` on `thread_id`
    /// with `input` (a JSON object). Idempotent per thread: submitting the
    /// same thread again is [`Submitted::Existing`] and changes nothing.
    pub async fn submit(
        &self,
        graph_name: &str,
        thread_id: &str,
        input: Value,
    ) -> Result<Submitted, WorkerError> {
        self.queue.submit(graph_name, thread_id, input).await
    }

    /// Delivers a parley answer; whichever worker claims the thread next
    /// resumes it with the answer.
    pub async fn answer(
        &self,
        thread_id: &str,
        response: ParleyResponse,
    ) -> Result<(), WorkerError> {
        self.queue.answer(thread_id, response).await
    }

    /// Puts a quarantined run back in the queue once its rows are
    /// repaired (see [`RunQueue::requeue`]).
    pub async fn requeue(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.queue.requeue(thread_id).await
    }

    /// Up to `max` quarantined runs, oldest first, each with its
    /// [`RunStatus::fault`](super::RunStatus::fault).
    pub async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        self.queue.quarantined(max).await
    }

    /// Up to `max` runs, the latest submitted first, only those in `state`
    /// and of graph `graph_name` when given (see [`RunQueue::runs`]).
    pub async fn runs(
        &self,
        state: Option<RunState>,
        graph_name: Option<&str>,
        max: usize,
    ) -> Result<Vec<RunStatus>, WorkerError> {
        self.queue.runs(state, graph_name, max).await
    }

    /// Lets the next claim take a run its unreadable-claim backoff holds
    /// back (see [`RunQueue::retry_now`]).
    pub async fn retry_now(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.queue.retry_now(thread_id).await
    }

    /// Cancels a run (see [`RunQueue::cancel`]).
    pub async fn cancel(&self, thread_id: &str) -> Result<(), WorkerError> {
        self.queue.cancel(thread_id).await
    }

    /// The run's status, `None` if it was never submitted.
    pub async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, WorkerError> {
        self.queue.status(thread_id).await
    }

    /// Every claim of the thread: who held which epoch, and how it ended.
    pub async fn attempts(&self, thread_id: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        self.queue.attempts(thread_id).await
    }

    /// Up to `max` unfinished runs pinned to a graph fingerprint that no
    /// live worker runs (stranded until a worker of that version or a
    /// compatible graph takes them), oldest first, each with what the live
    /// workers' graphs judged of it: compatible (claimed as soon as it is
    /// queued), incompatible with the reason, or not judged yet.
    pub async fn pinned(&self, max: usize) -> Result<Vec<PinnedRun>, WorkerError> {
        self.queue.pinned(None, max).await
    }

    /// Up to `max` unfinished runs pinned to `fingerprint`, whether or not
    /// a live worker runs it, with the live graphs' verdicts: before
    /// retiring the last workers of a version, the runs listed here whose
    /// verdicts are all incompatible are the ones that version (or a
    /// migration) still has to finish.
    pub async fn pinned_to(
        &self,
        fingerprint: &str,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        self.queue.pinned(Some(fingerprint), max).await
    }

    /// The thread's latest waypoint (its state and status).
    pub async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, WorkerError> {
        Ok(self.queue.waypoints().latest(thread_id).await?)
    }

    /// The thread's effects (`NodeContext::effect`) and their states, in
    /// key order: an effect still `Started` while no worker runs the
    /// thread is an unknown outcome its next run will resolve. Empty when
    /// the store keeps no effect ledger.
    pub async fn effects(&self, thread_id: &str) -> Result<Vec<EffectEntry>, WorkerError> {
        match self.queue.waypoints().effect_ledger() {
            Some(ledger) => Ok(ledger.entries(thread_id).await?),
            None => Ok(Vec::new()),
        }
    }

    /// Every waypoint of the thread, oldest first.
    pub async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, WorkerError> {
        Ok(self.queue.waypoints().history(thread_id).await?)
    }

    /// Waits until the run is finished, awaiting input or quarantined, at
    /// most `timeout`; returns its status then.
    pub async fn wait(&self, thread_id: &str, timeout: Duration) -> Result<RunStatus, WorkerError> {
        self.wait_until(thread_id, timeout, |s| {
            s.is_final() || s == RunState::AwaitingInput || s == RunState::Quarantined
        })
        .await
    }

    /// Waits until the run's state satisfies `done`, at most `timeout`.
    pub async fn wait_until(
        &self,
        thread_id: &str,
        timeout: Duration,
        done: impl Fn(RunState) -> bool,
    ) -> Result<RunStatus, WorkerError> {
        let start = tokio::time::Instant::now();
        loop {
            let status =
                self.queue
                    .status(thread_id)
                    .await?
                    .ok_or_else(|| WorkerError::UnknownThread {
                        thread_id: thread_id.to_string(),
                    })?;
            if done(status.state) {
                return Ok(status);
            }
            let waited = start.elapsed();
            let Some(left) = timeout.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Err(WorkerError::WaitTimedOut {
                    thread_id: thread_id.to_string(),
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            };
            // Wake-ups are prompt on every queue; the cap only bounds a
            // missed one.
            self.queue
                .wait_for_change(left.min(Duration::from_millis(200)))
                .await;
        }
    }
}
