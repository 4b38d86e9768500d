//! [`WorkerPool`]: claims runs of its graphs, runs them under leases,
//! heartbeats the leases, and shuts down gracefully.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{
    Claim, GraphKey, LeasedStore, Release, RunFault, RunQueue, Verdict, WorkerError, WorkerInfo,
};
use crate::engine::{RunOutcome, WarEngine};
use crate::error::EngineError;
use crate::error::StoreError;
use crate::graph::WarGraph;
use crate::waypoint::{WaypointStatus, WaypointStore};

/// Builds the engine a run executes on, around the run's fenced store: the
/// place to register a Paladin port, evaluators, handlers, caches, trace
/// sinks. The pool sets the engine's cancellation token itself.
pub type EngineFactory = Arc<dyn Fn(Arc<LeasedStore>) -> WarEngine<LeasedStore> + Send + Sync>;

/// How a [`WorkerPool`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// This worker's id in the queue (default: host-independent random).
    pub worker_id: String,
    /// The most runs executed at once (default 8).
    pub max_runs: usize,
    /// How long a claim holds without a heartbeat (default 30 s): a worker
    /// that dies loses its threads this long after its last renewal.
    pub lease_ttl: Duration,
    /// How often leases are renewed (default a third of `lease_ttl`).
    pub heartbeat_interval: Duration,
    /// The longest wait between two claim attempts when no wake-up arrives
    /// (default 1 s): it bounds takeover latency to `lease_ttl` + this.
    pub poll_interval: Duration,
    /// How long runs get to halt durably at shutdown before the pool stops
    /// waiting for them (default 10 s).
    pub shutdown_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            worker_id: format!("worker-{:016x}", rand::random::<u64>()),
            max_runs: 8,
            lease_ttl: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl WorkerConfig {
    /// Sets [`WorkerConfig::worker_id`].
    pub fn with_worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// Sets [`WorkerConfig::max_runs`] (at least 1).
    pub fn with_max_runs(mut self, runs: usize) -> Self {
        self.max_runs = runs.max(1);
        self
    }

    /// Sets [`WorkerConfig::lease_ttl`] (at least 1 ms), and the heartbeat
    /// to a third of it.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(Duration::from_millis(1));
        self.heartbeat_interval = (self.lease_ttl / 3).max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::heartbeat_interval`] (at least 1 ms).
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::poll_interval`] (at least 1 ms).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`WorkerConfig::shutdown_grace`].
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}

/// A worker: registers graphs by name, claims their runs from a
/// [`RunQueue`], runs up to [`WorkerConfig::max_runs`] at once, each on an
/// engine writing through a [`LeasedStore`], and keeps its leases alive.
///
/// [`WorkerPool::run`] returns once its shutdown token is cancelled and its
/// runs halted (each halted run is released back to the queue, durably at
/// its last waypoint) or `shutdown_grace` passed.
pub struct WorkerPool {
    queue: Arc<dyn RunQueue>,
    engine: EngineFactory,
    graphs: HashMap<String, Arc<WarGraph>>,
    config: WorkerConfig,
}

impl fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut graphs: Vec<_> = self.graphs.keys().collect();
        graphs.sort();
        f.debug_struct("WorkerPool")
            .field("graphs", &graphs)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// A worker on `queue` whose runs execute on engines built by `engine`.
    pub fn new(
        queue: Arc<dyn RunQueue>,
        engine: impl Fn(Arc<LeasedStore>) -> WarEngine<LeasedStore> + Send + Sync + 'static,
    ) -> Self {
        WorkerPool {
            queue,
            engine: Arc::new(engine),
            graphs: HashMap::new(),
            config: WorkerConfig::default(),
        }
    }

    /// Sets the configuration.
    pub fn with_config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs `graph` for submissions naming `name`. A name registered twice
    /// is [`WorkerError::Config`].
    pub fn register(
        mut self,
        name: impl Into<String>,
        graph: WarGraph,
    ) -> Result<Self, WorkerError> {
        let name = name.into();
        if name.is_empty() {
            return Err(WorkerError::Config("a graph name is empty".to_string()));
        }
        if self.graphs.contains_key(&name) {
            return Err(WorkerError::Config(format!(
                "graph `{name}` is registered twice"
            )));
        }
        self.graphs.insert(name, Arc::new(graph));
        Ok(self)
    }

    /// The configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The worker as the queue sees it.
    pub fn info(&self) -> WorkerInfo {
        let mut graphs: Vec<GraphKey> = self
            .graphs
            .iter()
            .map(|(name, g)| GraphKey::of(name.clone(), g))
            .collect();
        graphs.sort_by(|a, b| a.name.cmp(&b.name));
        WorkerInfo {
            worker_id: self.config.worker_id.clone(),
            graphs,
        }
    }

    /// Claims and runs threads until `shutdown` is cancelled, then halts
    /// the runs in flight (each within `shutdown_grace`), releases their
    /// leases and deregisters.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        if self.graphs.is_empty() {
            return Err(WorkerError::Config(
                "a worker needs at least one registered graph".to_string(),
            ));
        }
        let info = self.info();
        let shared = Arc::new(Shared {
            queue: self.queue.clone(),
            engine: self.engine.clone(),
            graphs: self.graphs.clone(),
            config: self.config.clone(),
        });
        let ttl = self.config.lease_ttl;
        self.queue.register(&info, ttl).await?;
        let mut runs: JoinSet<()> = JoinSet::new();
        let mut last_register = tokio::time::Instant::now();
        // When the last judging pass found less than a batch, the next one
        // waits: looking for threads of other versions reads the queue, and
        // outside a deploy there are none.
        let mut next_judge = last_register;
        while !shutdown.is_cancelled() {
            let now = tokio::time::Instant::now();
            if now.saturating_duration_since(last_register) >= self.config.heartbeat_interval {
                if let Err(e) = self.queue.register(&info, ttl).await {
                    tracing::warn!(error = %e, "aegis worker: registration heartbeat failed");
                }
                last_register = now;
            }
            let free = self.config.max_runs.saturating_sub(runs.len());
            let mut claimed = 0;
            if free > 0 {
                match self.queue.claim(&info, free, ttl).await {
                    Ok(claims) => {
                        claimed = claims.len();
                        for claim in claims {
                            tracing::info!(
                                worker = %info.worker_id,
                                thread_id = %claim.lease.thread_id,
                                epoch = claim.lease.epoch,
                                "aegis worker: claimed"
                            );
                            runs.spawn(shared.clone().execute(claim, shutdown.child_token()));
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "aegis worker: claim failed"),
                }
            }
            if claimed > 0 && runs.len() < self.config.max_runs {
                continue;
            }
            // Idle capacity: judge the threads other versions of our graphs
            // left, so those ours can continue are claimed (at once, if any
            // was found) and the rest show why they wait.
            if free > claimed && now >= next_judge {
                let judged = shared.judge(&info).await;
                if judged.seen < JUDGE_BATCH {
                    let pause = self.config.poll_interval.saturating_mul(JUDGE_PAUSE_POLLS);
                    next_judge = now.checked_add(pause).unwrap_or(now);
                }
                if judged.compatible > 0 {
                    continue;
                }
            }
            let wait = self
                .config
                .poll_interval
                .min(self.config.heartbeat_interval);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = self.queue.wait_for_change(wait) => {}
                Some(_) = runs.join_next(), if !runs.is_empty() => {}
            }
        }
        // Each run's token is a child of `shutdown`: they are all halting.
        let grace = self
            .config
            .shutdown_grace
            .saturating_add(self.config.heartbeat_interval);
        let drained =
            tokio::time::timeout(grace, async { while runs.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                worker = %info.worker_id,
                "aegis worker: runs still in flight after shutdown_grace; their leases will expire"
            );
            runs.abort_all();
        }
        self.queue.deregister(&info.worker_id).await
    }
}

/// What every run task of one pool shares.
struct Shared {
    queue: Arc<dyn RunQueue>,
    engine: EngineFactory,
    graphs: HashMap<String, Arc<WarGraph>>,
    config: WorkerConfig,
}

/// How a run's heartbeat ended it, if it did.
#[derive(Default)]
struct Flags {
    lost: AtomicBool,
    cancel_requested: AtomicBool,
}

fn is_lease_lost(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Store(StoreError::LeaseLost { .. }) | EngineError::ConcurrentUpdate { .. }
    )
}

/// How many threads a worker judges per pass: each costs a read of the
/// thread's latest waypoint.
const JUDGE_BATCH: usize = 32;

/// After a judging pass that found less than a batch, how many poll
/// intervals pass before the next one.
const JUDGE_PAUSE_POLLS: u32 = 10;

/// What a judging pass did.
#[derive(Debug, Default, Clone, Copy)]
struct Judged {
    /// Threads handed out to judge.
    seen: usize,
    /// Verdicts recorded compatible.
    compatible: usize,
}

impl Shared {
    /// Judges up to [`JUDGE_BATCH`] threads pinned to other versions of
    /// this worker's graphs, as `resume` would (the same check, on the
    /// thread's latest waypoint), and records each verdict; returns how
    /// many it saw and how many it recorded compatible. A thread whose
    /// waypoints cannot be read is left unjudged, to be tried again on a
    /// later pass.
    async fn judge(&self, info: &WorkerInfo) -> Judged {
        let runs = match self.queue.unjudged(info, JUDGE_BATCH).await {
            Ok(runs) => runs,
            Err(e) => {
                tracing::warn!(error = %e, "aegis worker: listing threads to judge failed");
                return Judged::default();
            }
        };
        let store = self.queue.waypoints();
        let seen = runs.len();
        let mut compatible = 0;
        for run in runs {
            let (Some(graph), Some(key)) = (
                self.graphs.get(&run.graph_name),
                info.graphs.iter().find(|g| g.name == run.graph_name),
            ) else {
                continue;
            };
            let verdict = match store.latest(&run.thread_id).await {
                // Claimed once but never written: it starts from its input
                // on any graph of its name.
                Ok(None) => Verdict::compatible(&run, key, None),
                Ok(Some(latest)) => match crate::engine::evolve::onto(graph, latest) {
                    Ok(moved) => Verdict::compatible(
                        &run,
                        key,
                        moved.previous_graph.and_then(|p| p.migration.clone()),
                    ),
                    Err(e) => Verdict::incompatible(&run, key, e.to_string()),
                },
                Err(e) => {
                    tracing::warn!(error = %e, thread_id = %run.thread_id, "aegis worker: reading a thread to judge failed");
                    continue;
                }
            };
            tracing::info!(
                worker = %info.worker_id,
                thread_id = %run.thread_id,
                pinned_to = %run.fingerprint,
                fingerprint = %key.fingerprint,
                compatible = verdict.compatible,
                "aegis worker: judged a thread of another version"
            );
            match self.queue.record_verdict(&verdict).await {
                Ok(()) => compatible += usize::from(verdict.compatible),
                Err(e) => {
                    tracing::warn!(error = %e, thread_id = %run.thread_id, "aegis worker: recording a verdict failed")
                }
            }
        }
        Judged { seen, compatible }
    }

    async fn execute(self: Arc<Self>, claim: Claim, token: CancellationToken) {
        let lease = claim.lease.clone();
        let flags = Arc::new(Flags::default());
        // Aborted on drop too: a run task aborted with its pool must not
        // leave a heartbeat keeping its lease alive.
        let beat = AbortOnDrop(tokio::spawn(heartbeat(
            self.queue.clone(),
            lease.clone(),
            self.config.lease_ttl,
            self.config.heartbeat_interval,
            token.clone(),
            flags.clone(),
        )));
        let release = self.drive(claim, token.clone()).await;
        drop(beat);
        let release = match release {
            Some(Release::Halted) if flags.cancel_requested.load(Ordering::SeqCst) => {
                Some(Release::Cancelled)
            }
            _ if flags.lost.load(Ordering::SeqCst) => None,
            other => other,
        };
        let result = match release {
            Some(release) => {
                tracing::info!(
                    worker = %lease.worker_id,
                    thread_id = %lease.thread_id,
                    epoch = lease.epoch,
                    outcome = release.outcome(),
                    "aegis worker: released"
                );
                self.queue.release(&lease, release).await
            }
            None => Err(WorkerError::LeaseLost {
                thread_id: lease.thread_id.clone(),
                epoch: lease.epoch,
            }),
        };
        if let Err(e) = result {
            if matches!(e, WorkerError::LeaseLost { .. }) {
                tracing::warn!(
                    worker = %lease.worker_id,
                    thread_id = %lease.thread_id,
                    epoch = lease.epoch,
                    "aegis worker: lease lost; run abandoned"
                );
                if let Err(e) = self.queue.abandon(&lease).await {
                    tracing::warn!(error = %e, "aegis worker: recording the abandoned attempt failed");
                }
            } else {
                tracing::warn!(error = %e, thread_id = %lease.thread_id, "aegis worker: release failed; the lease will expire");
            }
        }
    }

    /// Runs the claimed thread; `None` when the lease was lost.
    async fn drive(&self, claim: Claim, token: CancellationToken) -> Option<Release> {
        let thread_id = claim.lease.thread_id.clone();
        let Some(graph) = self.graphs.get(&claim.graph_name) else {
            // The queue only hands out graphs this worker registered.
            return Some(Release::Halted);
        };
        let store = Arc::new(LeasedStore::new(self.queue.clone(), claim.lease.clone()));
        let engine = (self.engine)(store.clone()).with_cancellation(token);
        let latest = match store.latest(&thread_id).await {
            Ok(latest) => latest,
            Err(e) => {
                // Released with a backoff, and quarantined after a few
                // such claims: never claimed again at once, which would
                // spin the fleet on one unreadable thread.
                tracing::warn!(error = %e, %thread_id, "aegis worker: the thread's waypoints are unreadable");
                return Some(Release::Poisoned(RunFault::UnreadableWaypoint {
                    message: e.to_string(),
                }));
            }
        };
        match (&claim.fault, &latest) {
            // The input only matters to a thread that has not started.
            (Some(fault @ RunFault::UnreadableInput { .. }), None)
            | (Some(fault @ RunFault::UnreadableAnswer { .. }), _) => {
                tracing::warn!(%fault, %thread_id, "aegis worker: the thread cannot be run as stored");
                return Some(Release::Poisoned(fault.clone()));
            }
            _ => {}
        }
        let result = match latest {
            None => engine.start(graph, &thread_id, claim.input).await,
            Some(waypoint) => match waypoint.status {
                WaypointStatus::Completed => return Some(Release::Completed),
                WaypointStatus::Failed { error, .. } => return Some(Release::Failed { error }),
                WaypointStatus::AwaitingInput { .. } => match claim.answer {
                    Some(answer) => engine.resume(graph, &thread_id, Some(answer)).await,
                    None => return Some(Release::AwaitingInput),
                },
                _ => engine.resume(graph, &thread_id, None).await,
            },
        };
        match result {
            Ok(RunOutcome::Completed { .. }) => Some(Release::Completed),
            Ok(RunOutcome::Failed { error, .. }) if is_lease_lost(&error) => None,
            Ok(RunOutcome::Failed { error, .. }) => Some(Release::Failed {
                error: error.to_string(),
            }),
            Ok(RunOutcome::AwaitingInput { .. }) => Some(Release::AwaitingInput),
            Ok(RunOutcome::Halted { .. }) => Some(Release::Halted),
            Err(e) if is_lease_lost(&e) => None,
            Err(EngineError::Store(
                e @ (StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. }),
            )) => Some(Release::Poisoned(RunFault::UnreadableWaypoint {
                message: e.to_string(),
            })),
            Err(e) => Some(Release::Failed {
                error: e.to_string(),
            }),
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews `lease` every `interval`; on a lost lease or a cancel request,
/// cancels the run's token (the engine halts; its writes are fenced anyway).
async fn heartbeat(
    queue: Arc<dyn RunQueue>,
    lease: super::Lease,
    ttl: Duration,
    interval: Duration,
    token: CancellationToken,
    flags: Arc<Flags>,
) {
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        match queue.renew(&lease, ttl).await {
            Ok(renewal) => {
                if renewal.cancel_requested {
                    flags.cancel_requested.store(true, Ordering::SeqCst);
                    token.cancel();
                    return;
                }
            }
            Err(WorkerError::LeaseLost { .. }) => {
                flags.lost.store(true, Ordering::SeqCst);
                token.cancel();
                return;
            }
            // The lease stays valid until it expires; the next beat tries
            // again, and fencing covers the case where it never succeeds.
            Err(e) => {
                tracing::warn!(error = %e, thread_id = %lease.thread_id, "aegis worker: lease renewal failed")
            }
        }
    }
}
