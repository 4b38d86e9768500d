//! [`InMemoryRunQueue`]: the run queue in one process's memory.

use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use super::types::{matching_fingerprint, waiting_reason};
use super::{
    AttemptInfo, Claim, Lease, Release, Renewal, RunQueue, RunState, RunStatus, Submitted,
    WorkerError, WorkerInfo,
};
use crate::error::StoreError;
use crate::graph::ParleyResponse;
use crate::waypoint::{InMemoryWaypointStore, Waypoint, WaypointStore};

/// The run queue and its waypoints in process memory: for tests, demos and
/// one-process deployments. Lease times follow tokio's clock, so a test on
/// a paused clock can expire a lease by advancing it.
///
/// A claim and a fenced write take one lock, so a write under a stale epoch
/// is refused exactly as on the durable queues.
#[derive(Debug, Default)]
pub struct InMemoryRunQueue {
    state: Mutex<State>,
    store: Arc<InMemoryWaypointStore>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    runs: HashMap<String, Run>,
    workers: HashMap<String, (WorkerInfo, Instant)>,
    next_order: u64,
}

#[derive(Debug)]
struct Run {
    graph_name: String,
    input: Value,
    state: RunState,
    epoch: u64,
    worker_id: Option<String>,
    expires: Option<Instant>,
    fingerprint: Option<String>,
    answer: Option<ParleyResponse>,
    error: Option<String>,
    cancel_requested: bool,
    order: u64,
    attempts: Vec<AttemptInfo>,
}

impl Run {
    fn held_by(&self, lease: &Lease) -> bool {
        self.epoch == lease.epoch && self.state == RunState::Running
    }

    fn set_attempt_outcome(&mut self, epoch: u64, outcome: &str) {
        if let Some(a) = self.attempts.iter_mut().find(|a| a.epoch == epoch) {
            a.outcome = outcome.to_string();
        }
    }
}

fn lost(lease: &Lease) -> WorkerError {
    WorkerError::LeaseLost {
        thread_id: lease.thread_id.clone(),
        epoch: lease.epoch,
    }
}

fn unknown(thread_id: &str) -> WorkerError {
    WorkerError::UnknownThread {
        thread_id: thread_id.to_string(),
    }
}

impl InMemoryRunQueue {
    /// An empty queue with an empty waypoint store.
    pub fn new() -> Self {
        Self::default()
    }

    fn expiry(ttl: Duration) -> Instant {
        let now = Instant::now();
        // A TTL too long for the clock never expires in practice.
        now.checked_add(ttl)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
    }
}

#[async_trait]
impl RunQueue for InMemoryRunQueue {
    fn waypoints(&self) -> Arc<dyn WaypointStore> {
        self.store.clone()
    }

    async fn put_fenced(&self, lease: &Lease, waypoint: Waypoint) -> Result<(), StoreError> {
        let state = self.state.lock().await;
        let current = state.runs.get(&lease.thread_id);
        match current {
            Some(run) if run.held_by(lease) => self.store.put(waypoint).await,
            other => Err(StoreError::LeaseLost {
                thread_id: lease.thread_id.clone(),
                epoch: lease.epoch,
                current: other.map_or(0, |r| r.epoch),
            }),
        }
    }

    async fn submit(
        &self,
        graph_name: &str,
        thread_id: &str,
        input: Value,
    ) -> Result<Submitted, WorkerError> {
        super::validate_submission(graph_name, thread_id, &input)?;
        let mut state = self.state.lock().await;
        if let Some(run) = state.runs.get(thread_id) {
            return super::existing_submission(thread_id, &run.graph_name, graph_name);
        }
        let order = state.next_order;
        state.next_order = order.saturating_add(1);
        state.runs.insert(
            thread_id.to_string(),
            Run {
                graph_name: graph_name.to_string(),
                input,
                state: RunState::Queued,
                epoch: 0,
                worker_id: None,
                expires: None,
                fingerprint: None,
                answer: None,
                error: None,
                cancel_requested: false,
                order,
                attempts: Vec::new(),
            },
        );
        drop(state);
        super::wake(&self.changed);
        Ok(Submitted::New)
    }

    async fn register(&self, worker: &WorkerInfo, ttl: Duration) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        state.workers.insert(
            worker.worker_id.clone(),
            (worker.clone(), Self::expiry(ttl)),
        );
        Ok(())
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), WorkerError> {
        self.state.lock().await.workers.remove(worker_id);
        Ok(())
    }

    async fn claim(
        &self,
        worker: &WorkerInfo,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Claim>, WorkerError> {
        let now = Instant::now();
        let mut state = self.state.lock().await;
        let mut due: Vec<(u64, String)> = Vec::new();
        for (thread_id, run) in state.runs.iter_mut() {
            let expired = run.state == RunState::Running && run.expires.is_some_and(|e| e <= now);
            if expired && run.cancel_requested {
                run.state = RunState::Cancelled;
                run.worker_id = None;
                run.expires = None;
                let epoch = run.epoch;
                run.set_attempt_outcome(epoch, "expired");
                continue;
            }
            let runnable = run.state == RunState::Queued || expired;
            if runnable
                && matching_fingerprint(&worker.graphs, &run.graph_name, run.fingerprint.as_deref())
                    .is_some()
            {
                due.push((run.order, thread_id.clone()));
            }
        }
        due.sort();
        due.truncate(max);
        let mut claims = Vec::with_capacity(due.len());
        for (_, thread_id) in due {
            let Some(run) = state.runs.get_mut(&thread_id) else {
                continue;
            };
            let Some(fp) =
                matching_fingerprint(&worker.graphs, &run.graph_name, run.fingerprint.as_deref())
            else {
                continue;
            };
            if run.state == RunState::Running {
                let previous = run.epoch;
                run.set_attempt_outcome(previous, "expired");
            }
            run.fingerprint = Some(fp.to_string());
            run.epoch = run.epoch.saturating_add(1);
            run.state = RunState::Running;
            run.worker_id = Some(worker.worker_id.clone());
            run.expires = Some(Self::expiry(ttl));
            run.attempts.push(AttemptInfo {
                epoch: run.epoch,
                worker_id: worker.worker_id.clone(),
                outcome: "running".to_string(),
            });
            claims.push(Claim {
                lease: Lease {
                    thread_id: thread_id.clone(),
                    epoch: run.epoch,
                    worker_id: worker.worker_id.clone(),
                },
                graph_name: run.graph_name.clone(),
                input: run.input.clone(),
                answer: run.answer.clone(),
            });
        }
        Ok(claims)
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Renewal, WorkerError> {
        let mut state = self.state.lock().await;
        match state.runs.get_mut(&lease.thread_id) {
            Some(run) if run.held_by(lease) => {
                run.expires = Some(Self::expiry(ttl));
                Ok(Renewal {
                    cancel_requested: run.cancel_requested,
                })
            }
            _ => Err(lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease, release: Release) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = match state.runs.get_mut(&lease.thread_id) {
            Some(run) if run.held_by(lease) => run,
            _ => return Err(lost(lease)),
        };
        let mut next = release.state();
        if next == RunState::Queued && run.cancel_requested {
            next = RunState::Cancelled;
        }
        run.state = next;
        run.worker_id = None;
        run.expires = None;
        run.error = release.error().map(str::to_string);
        // The answer was delivered by the run that just ended.
        run.answer = None;
        run.set_attempt_outcome(lease.epoch, release.outcome());
        drop(state);
        super::wake(&self.changed);
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        if let Some(run) = state.runs.get_mut(&lease.thread_id) {
            run.set_attempt_outcome(lease.epoch, "abandoned");
        }
        Ok(())
    }

    async fn answer(&self, thread_id: &str, response: ParleyResponse) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = state
            .runs
            .get_mut(thread_id)
            .ok_or_else(|| unknown(thread_id))?;
        if run.state != RunState::AwaitingInput {
            return Err(WorkerError::NotAwaitingInput {
                thread_id: thread_id.to_string(),
                state: run.state.to_string(),
            });
        }
        run.answer = Some(response);
        run.state = RunState::Queued;
        drop(state);
        super::wake(&self.changed);
        Ok(())
    }

    async fn cancel(&self, thread_id: &str) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = state
            .runs
            .get_mut(thread_id)
            .ok_or_else(|| unknown(thread_id))?;
        match run.state {
            RunState::Queued | RunState::AwaitingInput => run.state = RunState::Cancelled,
            RunState::Running => run.cancel_requested = true,
            _ => {}
        }
        drop(state);
        super::wake(&self.changed);
        Ok(())
    }

    async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, WorkerError> {
        let now = Instant::now();
        let state = self.state.lock().await;
        let Some(run) = state.runs.get(thread_id) else {
            return Ok(None);
        };
        let live: Vec<WorkerInfo> = state
            .workers
            .values()
            .filter(|(_, until)| *until > now)
            .map(|(w, _)| w.clone())
            .collect();
        let expired = run.state == RunState::Running && run.expires.is_some_and(|e| e <= now);
        let waiting = run.state == RunState::Queued || expired;
        Ok(Some(RunStatus {
            thread_id: thread_id.to_string(),
            graph_name: run.graph_name.clone(),
            state: run.state,
            epoch: run.epoch,
            worker_id: run.worker_id.clone(),
            fingerprint: run.fingerprint.clone(),
            error: run.error.clone(),
            waiting_reason: waiting
                .then(|| waiting_reason(&run.graph_name, run.fingerprint.as_deref(), &live))
                .flatten(),
        }))
    }

    async fn attempts(&self, thread_id: &str) -> Result<Vec<AttemptInfo>, WorkerError> {
        let state = self.state.lock().await;
        Ok(state
            .runs
            .get(thread_id)
            .map(|r| r.attempts.clone())
            .unwrap_or_default())
    }

    async fn wait_for_change(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }
}
