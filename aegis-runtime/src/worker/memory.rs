//! [`InMemoryRunQueue`]: the run queue in one process's memory.

use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use super::types::{claiming_graph, runs_fingerprint, to_judge, waiting_reason};
use super::{
    AttemptInfo, Claim, Lease, PinnedRun, QueueStats, Release, Renewal, RunFault, RunQueue,
    RunState, RunStatus, Submitted, Verdict, WorkerError, WorkerInfo,
};
use crate::error::StoreError;
use crate::graph::{EffectEntry, EffectOp, EffectStart};
use crate::graph::{EffectLedger, ParleyResponse};
use crate::waypoint::{InMemoryEffectLedger, InMemoryWaypointStore, Waypoint, WaypointStore};

/// The run queue and its waypoints in process memory: for tests, demos and
/// one-process deployments. Lease times follow tokio's clock, so a test on
/// a paused clock can expire a lease by advancing it.
///
/// A claim and a fenced write take one lock, so a write under a stale epoch
/// is refused exactly as on the durable queues.
#[derive(Debug, Default)]
pub struct InMemoryRunQueue {
    /// Shared with the fenced effect ledgers it hands out.
    state: Arc<Mutex<State>>,
    store: Arc<InMemoryWaypointStore>,
    changed: Notify,
}

// As before the state was shared with the effect ledgers: an `Arc` of a
// tokio mutex is not `UnwindSafe` by itself, yet a panic leaves the queue
// as consistent as it left the unshared mutex (every update is made under
// the lock, and tokio's mutex does not poison).
impl std::panic::UnwindSafe for InMemoryRunQueue {}

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
    /// When the run last entered the `Queued` state (meaningful while it
    /// is queued).
    queued_since: Instant,
    attempts: Vec<AttemptInfo>,
    /// One per judging graph; only those of the current epoch count.
    verdicts: Vec<Verdict>,
    /// The latest move onto another graph: the fingerprint it left and the
    /// migration that carried it.
    moved: Option<(String, Option<String>)>,
    /// Why the latest claims could not run it, how many in a row, and when
    /// it may be claimed again.
    fault: Option<(RunFault, u32, Option<Instant>)>,
}

impl Run {
    /// The verdicts of the run's current epoch.
    fn verdicts(&self) -> Vec<Verdict> {
        self.verdicts
            .iter()
            .filter(|v| v.epoch == self.epoch)
            .cloned()
            .collect()
    }

    /// Whether the run waits for a worker: queued, or running under an
    /// expired lease.
    fn waits(&self, now: Instant) -> bool {
        self.state == RunState::Queued
            || (self.state == RunState::Running && self.expires.is_some_and(|e| e <= now))
    }

    /// Whether an unreadable thread's backoff holds it back at `now`.
    fn held_back(&self, now: Instant) -> bool {
        self.fault
            .as_ref()
            .and_then(|(_, _, until)| *until)
            .is_some_and(|until| until > now)
    }

    fn status(&self, thread_id: &str, waiting_reason: Option<String>) -> RunStatus {
        RunStatus {
            thread_id: thread_id.to_string(),
            graph_name: self.graph_name.clone(),
            state: self.state,
            epoch: self.epoch,
            worker_id: self.worker_id.clone(),
            fingerprint: self.fingerprint.clone(),
            error: self.error.clone(),
            waiting_reason,
            previous_fingerprint: self.moved.as_ref().map(|(from, _)| from.clone()),
            migration: self.moved.as_ref().and_then(|(_, m)| m.clone()),
            fault: self.fault.as_ref().map(|(f, _, _)| f.clone()),
        }
    }

    fn held_by(&self, lease: &Lease) -> bool {
        self.epoch == lease.epoch && self.state == RunState::Running
    }

    fn set_attempt_outcome(&mut self, epoch: u64, outcome: &str) {
        if let Some(a) = self.attempts.iter_mut().find(|a| a.epoch == epoch) {
            a.outcome = outcome.to_string();
        }
    }
}

/// The graph a claim runs a thread on: its fingerprint, and the migration
/// that carries the thread onto it (when it moves by one).
type GraphPick = (String, Option<String>);

/// The workers whose registration has not expired.
fn live_workers(state: &State, now: Instant) -> Vec<WorkerInfo> {
    state
        .workers
        .values()
        .filter(|(_, until)| *until > now)
        .map(|(w, _)| w.clone())
        .collect()
}

fn pinned_run(thread_id: &str, run: &Run, fingerprint: &str, verdicts: Vec<Verdict>) -> PinnedRun {
    let mut pinned = PinnedRun::new(
        thread_id,
        run.graph_name.clone(),
        run.state,
        run.epoch,
        fingerprint,
    );
    pinned.verdicts = verdicts;
    pinned
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

    /// Ends every unreadable thread's backoff, for tests that step
    /// through the claims a poisoned thread gets.
    #[cfg(test)]
    pub(crate) async fn lift_backoffs(&self) {
        for run in self.state.lock().await.runs.values_mut() {
            if let Some((_, _, until)) = &mut run.fault {
                *until = None;
            }
        }
    }

    /// Moves every queued run's queued-since time `by` into the past (as
    /// far as the clock goes), for tests of the oldest queued run's age.
    #[cfg(test)]
    pub(crate) async fn backdate_queued(&self, by: Duration) {
        for run in self.state.lock().await.runs.values_mut() {
            if run.state == RunState::Queued
                && let Some(earlier) = run.queued_since.checked_sub(by)
            {
                run.queued_since = earlier;
            }
        }
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

    fn effect_ledger(&self, lease: &Lease) -> Option<Arc<dyn EffectLedger>> {
        Some(Arc::new(FencedEffects {
            state: self.state.clone(),
            ledger: self.store.effects().clone(),
            lease: lease.clone(),
        }))
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
                queued_since: Instant::now(),
                attempts: Vec::new(),
                verdicts: Vec::new(),
                moved: None,
                fault: None,
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
        let live = live_workers(&state, now);
        let mut due: Vec<(u64, String, GraphPick)> = Vec::new();
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
            if !run.waits(now) || run.held_back(now) {
                continue;
            }
            let pinned_live = run
                .fingerprint
                .as_deref()
                .is_some_and(|fp| runs_fingerprint(&live, &run.graph_name, fp));
            let verdicts = run.verdicts();
            if let Some(g) = claiming_graph(
                &worker.graphs,
                &run.graph_name,
                run.fingerprint.as_deref(),
                pinned_live,
                &verdicts,
            ) {
                let migration = verdicts
                    .iter()
                    .find(|v| v.is_by(g))
                    .and_then(|v| v.migration.clone());
                due.push((
                    run.order,
                    thread_id.clone(),
                    (g.fingerprint.clone(), migration),
                ));
            }
        }
        due.sort();
        due.truncate(max);
        let mut claims = Vec::with_capacity(due.len());
        for (_, thread_id, (fp, migration)) in due {
            let Some(run) = state.runs.get_mut(&thread_id) else {
                continue;
            };
            if run.state == RunState::Running {
                let previous = run.epoch;
                run.set_attempt_outcome(previous, "expired");
            }
            if let Some(from) = run.fingerprint.take().filter(|from| *from != fp) {
                run.moved = Some((from, migration));
            }
            run.fingerprint = Some(fp);
            run.epoch = run.epoch.saturating_add(1);
            run.state = RunState::Running;
            run.worker_id = Some(worker.worker_id.clone());
            run.expires = Some(Self::expiry(ttl));
            run.attempts.push(AttemptInfo {
                epoch: run.epoch,
                worker_id: worker.worker_id.clone(),
                outcome: "running".to_string(),
            });
            claims.push(Claim::new(
                Lease {
                    thread_id: thread_id.clone(),
                    epoch: run.epoch,
                    worker_id: worker.worker_id.clone(),
                },
                run.graph_name.clone(),
                run.input.clone(),
                run.answer.clone(),
            ));
        }
        Ok(claims)
    }

    async fn unjudged(
        &self,
        worker: &WorkerInfo,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        let now = Instant::now();
        let state = self.state.lock().await;
        let mut found: Vec<(u64, PinnedRun)> = state
            .runs
            .iter()
            .filter(|(_, run)| run.waits(now) || run.state == RunState::AwaitingInput)
            .filter_map(|(thread_id, run)| {
                let fp = run.fingerprint.as_deref()?;
                to_judge(worker, &run.graph_name, fp, &run.verdicts())?;
                Some((run.order, pinned_run(thread_id, run, fp, Vec::new())))
            })
            .collect();
        found.sort_by_key(|(order, _)| *order);
        Ok(found.into_iter().take(max).map(|(_, r)| r).collect())
    }

    async fn record_verdict(&self, verdict: &Verdict) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = state
            .runs
            .get_mut(&verdict.thread_id)
            .ok_or_else(|| unknown(&verdict.thread_id))?;
        run.verdicts.retain(|v| {
            !(v.fingerprint == verdict.fingerprint && v.migrations == verdict.migrations)
        });
        run.verdicts.push(verdict.clone());
        Ok(())
    }

    async fn pinned(
        &self,
        fingerprint: Option<&str>,
        max: usize,
    ) -> Result<Vec<PinnedRun>, WorkerError> {
        let now = Instant::now();
        let state = self.state.lock().await;
        let live = live_workers(&state, now);
        let mut found: Vec<(u64, PinnedRun)> = state
            .runs
            .iter()
            .filter(|(_, run)| run.waits(now) || run.state == RunState::AwaitingInput)
            .filter_map(|(thread_id, run)| {
                let fp = run.fingerprint.as_deref()?;
                let listed = match fingerprint {
                    Some(wanted) => wanted == fp,
                    None => !runs_fingerprint(&live, &run.graph_name, fp),
                };
                listed.then(|| (run.order, pinned_run(thread_id, run, fp, run.verdicts())))
            })
            .collect();
        found.sort_by_key(|(order, _)| *order);
        Ok(found.into_iter().take(max).map(|(_, r)| r).collect())
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
        let mut held_until = None;
        match &release {
            Release::Poisoned(fault) => {
                let count = run
                    .fault
                    .as_ref()
                    .map_or(0, |(_, n, _)| *n)
                    .saturating_add(1);
                let (state, wait) = fault.next(count);
                next = state;
                held_until = wait.map(Self::expiry);
                run.fault = Some((fault.clone(), count, held_until));
            }
            // The thread was read: whatever failed before is over.
            _ => run.fault = None,
        }
        if next == RunState::Queued && run.cancel_requested {
            next = RunState::Cancelled;
        }
        if next == RunState::Queued {
            run.queued_since = Instant::now();
        }
        run.state = next;
        run.worker_id = None;
        run.expires = None;
        run.error = release.error();
        // The answer was delivered by the run that just ended (an
        // unreadable one stays, for the operator to see).
        if !matches!(
            release,
            Release::Poisoned(RunFault::UnreadableAnswer { .. })
        ) {
            run.answer = None;
        }
        run.set_attempt_outcome(lease.epoch, release.outcome());
        if next.is_final() {
            run.verdicts.clear();
        }
        drop(state);
        // A thread held back by a backoff wakes nobody: no worker may
        // claim it yet, and polls find it when it may.
        if held_until.is_none() {
            super::wake(&self.changed);
        }
        Ok(())
    }

    async fn requeue(&self, thread_id: &str) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = state
            .runs
            .get_mut(thread_id)
            .ok_or_else(|| unknown(thread_id))?;
        if run.state != RunState::Quarantined {
            return Err(WorkerError::NotQuarantined {
                thread_id: thread_id.to_string(),
                state: run.state.to_string(),
            });
        }
        // An unreadable answer is dropped: the run waits for a new one.
        // Anything else runs again from its rows.
        if let Some((RunFault::UnreadableAnswer { .. }, _, _)) = run.fault {
            run.state = RunState::AwaitingInput;
            run.answer = None;
        } else {
            run.state = RunState::Queued;
            run.queued_since = Instant::now();
        }
        run.fault = None;
        run.error = None;
        drop(state);
        super::wake(&self.changed);
        Ok(())
    }

    async fn quarantined(&self, max: usize) -> Result<Vec<RunStatus>, WorkerError> {
        let state = self.state.lock().await;
        let mut found: Vec<(u64, RunStatus)> = state
            .runs
            .iter()
            .filter(|(_, run)| run.state == RunState::Quarantined)
            .map(|(thread_id, run)| (run.order, run.status(thread_id, None)))
            .collect();
        found.sort_by_key(|(order, _)| *order);
        Ok(found.into_iter().take(max).map(|(_, s)| s).collect())
    }

    async fn stats(&self) -> Result<Option<QueueStats>, WorkerError> {
        let now = Instant::now();
        let state = self.state.lock().await;
        let mut stats = QueueStats::new();
        for run in state.runs.values() {
            stats = stats.with_runs(run.state, 1);
            if run.state == RunState::Queued {
                stats = stats.with_queued_age(now.saturating_duration_since(run.queued_since));
            }
            for attempt in &run.attempts {
                stats = stats.with_claims(&attempt.outcome, 1);
            }
        }
        Ok(Some(stats))
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
        run.queued_since = Instant::now();
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
        let live = live_workers(&state, now);
        let waiting = run.waits(now).then(|| {
            waiting_reason(
                &run.graph_name,
                run.fingerprint.as_deref(),
                &live,
                &run.verdicts(),
            )
        });
        Ok(Some(run.status(thread_id, waiting.flatten())))
    }

    async fn runs(
        &self,
        state: Option<RunState>,
        graph_name: Option<&str>,
        max: usize,
    ) -> Result<Vec<RunStatus>, WorkerError> {
        let mut picked: Vec<(u64, String)> = {
            let queue = self.state.lock().await;
            queue
                .runs
                .iter()
                .filter(|(_, run)| state.is_none_or(|s| run.state == s))
                .filter(|(_, run)| graph_name.is_none_or(|g| run.graph_name == g))
                .map(|(thread_id, run)| (run.order, thread_id.clone()))
                .collect()
        };
        picked.sort_by_key(|(order, _)| std::cmp::Reverse(*order));
        let mut found = Vec::with_capacity(picked.len().min(max));
        for (_, thread_id) in picked.into_iter().take(max) {
            if let Some(status) = self.status(&thread_id).await? {
                found.push(status);
            }
        }
        Ok(found)
    }

    async fn retry_now(&self, thread_id: &str) -> Result<(), WorkerError> {
        let mut state = self.state.lock().await;
        let run = state
            .runs
            .get_mut(thread_id)
            .ok_or_else(|| unknown(thread_id))?;
        if let Some((_, _, until)) = &mut run.fault {
            *until = None;
        }
        drop(state);
        super::wake(&self.changed);
        Ok(())
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

/// The in-memory store's effect ledger, fenced by one lease: each
/// operation checks the lease under the queue's lock and applies itself
/// while still holding it.
struct FencedEffects {
    state: Arc<Mutex<State>>,
    ledger: Arc<InMemoryEffectLedger>,
    lease: Lease,
}

impl FencedEffects {
    async fn apply(&self, key: &str, op: &EffectOp) -> Result<Option<EffectEntry>, StoreError> {
        let state = self.state.lock().await;
        match state.runs.get(&self.lease.thread_id) {
            Some(run) if run.held_by(&self.lease) => Ok(self.ledger.apply(key, op)),
            other => Err(StoreError::LeaseLost {
                thread_id: self.lease.thread_id.clone(),
                epoch: self.lease.epoch,
                current: other.map_or(0, |r| r.epoch),
            }),
        }
    }
}

#[async_trait]
impl EffectLedger for FencedEffects {
    async fn begin(&self, start: &EffectStart) -> Result<Option<EffectEntry>, StoreError> {
        crate::id::validate_thread_id(&start.thread_id).map_err(StoreError::InvalidThreadId)?;
        self.apply(&start.key, &EffectOp::Begin(start.clone()))
            .await
    }

    async fn restart(&self, key: &str) -> Result<(), StoreError> {
        self.apply(key, &EffectOp::Restart).await.map(drop)
    }

    async fn finish(&self, key: &str, result: &Value) -> Result<(), StoreError> {
        self.apply(key, &EffectOp::Finish(result.clone()))
            .await
            .map(drop)
    }

    async fn entries(&self, thread_id: &str) -> Result<Vec<EffectEntry>, StoreError> {
        self.ledger.entries(thread_id).await
    }
}
