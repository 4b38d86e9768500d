//! [`WorkerPool`]: claims runs of its graphs, runs them under leases,
//! heartbeats the leases, and shuts down gracefully.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::call::within;
use super::judge::{JUDGE_BATCH, JUDGE_PAUSE_POLLS, judge};
use super::lease_clock::{LeaseEnd, heartbeat};
use super::{
    Claim, GraphKey, LeasedStore, Release, RunFault, RunQueue, WorkerConfig, WorkerError,
    WorkerInfo,
};
use crate::engine::{RunOutcome, WarEngine};
use crate::error::EngineError;
use crate::error::StoreError;
use crate::graph::WarGraph;
use crate::share::IntoShared;
use crate::waypoint::{WaypointStatus, WaypointStore};

/// Builds the engine a run executes on, around the run's fenced store: the
/// place to register a Paladin port, evaluators, handlers, caches, trace
/// sinks. The pool sets the engine's cancellation token itself.
pub type EngineFactory = Arc<dyn Fn(Arc<LeasedStore>) -> WarEngine<LeasedStore> + Send + Sync>;

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
    /// A worker on `queue` (the queue, or an `Arc` of it: see
    /// [`IntoShared`](crate::engine::IntoShared)) whose runs execute on engines
    /// built by `engine` from each run's [`LeasedStore`]:
    /// `|store| WarEngine::new(store).with_llm(llm.clone())`.
    pub fn new(
        queue: impl IntoShared<dyn RunQueue>,
        engine: impl Fn(Arc<LeasedStore>) -> WarEngine<LeasedStore> + Send + Sync + 'static,
    ) -> Self {
        WorkerPool {
            queue: queue.into_shared(),
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
        let limit = self.config.effective_call_timeout();
        within(limit, "the registration", self.queue.register(&info, ttl)).await?;
        let mut runs: JoinSet<()> = JoinSet::new();
        let mut last_register = tokio::time::Instant::now();
        // When the last judging pass found less than a batch, the next one
        // waits: looking for threads of other versions reads the queue, and
        // outside a deploy there are none.
        let mut next_judge = last_register;
        while !shutdown.is_cancelled() {
            let now = tokio::time::Instant::now();
            if now.saturating_duration_since(last_register) >= self.config.heartbeat_interval {
                if let Err(e) =
                    within(limit, "the registration", self.queue.register(&info, ttl)).await
                {
                    tracing::warn!(error = %e, "aegis worker: registration heartbeat failed");
                }
                last_register = now;
            }
            let free = self.config.max_runs.saturating_sub(runs.len());
            let mut claimed = 0;
            if free > 0 {
                // The leases count from when they were asked for.
                let sent = Instant::now();
                match within(limit, "a claim", self.queue.claim(&info, free, ttl)).await {
                    Ok(claims) => {
                        claimed = claims.len();
                        #[cfg(feature = "metrics")]
                        if let Some(observer) = crate::trace::observe::observer()
                            && claimed > 0
                        {
                            observer.claimed(claimed);
                        }
                        for claim in claims {
                            tracing::info!(
                                worker = %info.worker_id,
                                thread_id = %claim.lease.thread_id,
                                epoch = claim.lease.epoch,
                                "aegis worker: claimed"
                            );
                            runs.spawn(shared.clone().execute(claim, sent, shutdown.child_token()));
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
                let judged = judge(&self.queue, &self.graphs, &info, limit).await;
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
        within(
            limit,
            "the deregistration",
            self.queue.deregister(&info.worker_id),
        )
        .await
    }
}

/// What every run task of one pool shares.
struct Shared {
    queue: Arc<dyn RunQueue>,
    engine: EngineFactory,
    graphs: HashMap<String, Arc<WarGraph>>,
    config: WorkerConfig,
}

fn is_lease_lost(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Store(StoreError::LeaseLost { .. }) | EngineError::ConcurrentUpdate { .. }
    )
}

impl Shared {
    /// Runs `claim` (asked for at `sent`) under its lease until it ends or
    /// the lease is lost, then releases it, or records it abandoned.
    async fn execute(self: Arc<Self>, claim: Claim, sent: Instant, token: CancellationToken) {
        let lease = claim.lease.clone();
        let end = Arc::new(LeaseEnd::default());
        // Aborted on drop too: a run task aborted with its pool must not
        // leave a heartbeat keeping its lease alive.
        let beat = AbortOnDropHandle::new(tokio::spawn(heartbeat(
            self.queue.clone(),
            lease.clone(),
            self.config.lease_ttl,
            self.config.heartbeat_interval,
            sent,
            token.clone(),
            end.clone(),
        )));
        // A lost lease drops the run where it stands: its nodes stop
        // calling out, and nothing it would still write could land (a
        // write waiting on a dark connection included).
        let release = tokio::select! {
            release = self.drive(claim, token.clone()) => release,
            _ = end.lost.cancelled() => None,
        };
        drop(beat);
        let release = match release {
            Some(Release::Halted) if end.is_cancel_requested() => Some(Release::Cancelled),
            _ if end.is_lost() => None,
            other => other,
        };
        let limit = self.config.effective_call_timeout();
        let result = match release {
            Some(release) => {
                tracing::info!(
                    worker = %lease.worker_id,
                    thread_id = %lease.thread_id,
                    epoch = lease.epoch,
                    outcome = release.outcome(),
                    "aegis worker: released"
                );
                #[cfg(feature = "metrics")]
                if let Some(observer) = crate::trace::observe::observer() {
                    observer.released(release.outcome());
                }
                within(limit, "a release", self.queue.release(&lease, release)).await
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
                #[cfg(feature = "metrics")]
                if let Some(observer) = crate::trace::observe::observer() {
                    observer.abandoned();
                }
                // Recorded on the side: the slot is free now, even when
                // the queue is out of reach.
                let queue = self.queue.clone();
                tokio::spawn(async move {
                    if let Err(e) = within(limit, "an abandonment", queue.abandon(&lease)).await {
                        tracing::warn!(error = %e, "aegis worker: recording the abandoned attempt failed");
                    }
                });
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
        let store = Arc::new(
            LeasedStore::new(self.queue.clone(), claim.lease.clone())
                .with_call_timeout(self.config.effective_call_timeout()),
        );
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
            // The store failed or did not answer (a slow or dark database):
            // the thread is where its last waypoint left it, and another
            // claim goes on from there. Not the run's failure.
            Ok(RunOutcome::Failed { error, .. }) if is_store_trouble(&error) => {
                tracing::warn!(error = %error, %thread_id, "aegis worker: the waypoint store failed; the run goes back to the queue");
                Some(Release::Halted)
            }
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
            Err(e) if is_store_trouble(&e) => {
                tracing::warn!(error = %e, %thread_id, "aegis worker: the waypoint store failed; the run goes back to the queue");
                Some(Release::Halted)
            }
            Err(e) => Some(Release::Failed {
                error: e.to_string(),
            }),
        }
    }
}

/// Whether `e` is the store's trouble (failed or out of time), not the
/// run's: the run is retried from its last waypoint, never failed for it.
fn is_store_trouble(e: &EngineError) -> bool {
    matches!(e, EngineError::Store(StoreError::Backend(_)))
}
