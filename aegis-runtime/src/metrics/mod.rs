//! Prometheus metrics (feature `metrics`): what the engine, fallback chains,
//! circuit breakers and worker pools of this process did, and the fleet's
//! queue as it stands, in the OpenMetrics text format on a `/metrics`
//! endpoint.
//!
//! [`Metrics::install`] turns counting on for the whole process (until then
//! every counting point costs one atomic load); [`Metrics::watch_queue`]
//! adds a queue read at each scrape; [`Metrics::serve`] answers scrapes.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `aegis_runs_finished_total` | `outcome` | start/resume calls ended: `Completed`, `Failed`, `Halted`, `AwaitingInput` |
//! | `aegis_attempts_total` | `node`, `outcome`, `transience` | attempts ended: `succeeded`, `failed`, `skipped`; a failure's transience (`none` otherwise) |
//! | `aegis_attempt_timeouts_total` | `node`, `kind` | attempts cut by a timeout: `run`, `idle`, `engine_run` |
//! | `aegis_retries_total` | `node` | retries scheduled |
//! | `aegis_retries_skipped_total` | `node`, `bound` | retries not begun: their wait would overrun `run_budget` or `enclosing_deadline` |
//! | `aegis_cache_hits_total`, `aegis_cache_misses_total` | `node` | node cache lookups |
//! | `aegis_fallback_hops_total` | `from`, `to` | fallback chain hops, by provider |
//! | `aegis_circuit_breaker_state` | `provider`, `state` | 1 for the breaker's state (`closed`, `open`, `half_open`), 0 for the others |
//! | `aegis_worker_claims_total` | | runs this process's workers claimed |
//! | `aegis_worker_releases_total` | `outcome` | runs they released: `completed`, `failed`, `halted`, `poisoned`, ... |
//! | `aegis_worker_abandons_total` | | runs they gave up after losing the lease |
//! | `aegis_lease_renewal_lag_seconds` | | histogram: how long after it was due each lease renewal was confirmed |
//! | `aegis_runs` | `state` | the watched queues' runs by state (read at each scrape) |
//! | `aegis_queue_depth` | | their queued runs |
//! | `aegis_queue_oldest_queued_run_age_seconds` | | how long the oldest of them has been queued (since it was submitted, released back to the queue, requeued or answered); 0 when none is |
//! | `aegis_fleet_claims_total`, `aegis_fleet_takeovers_total`, `aegis_fleet_abandons_total` | | every worker's claims, takeovers of expired leases, and abandoned claims, as the queues record them |
//! | `aegis_queue_read_errors_total` | | scrapes whose queue read failed or timed out |
//! | `aegis_otel_spans_dropped_total` | | finished spans the full trace export queue turned away (feature `otel`) |

mod server;

pub use server::MetricsServer;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::error::{NodeErrorSource, TimeoutKind, Transience};
use crate::id::NodeId;
use crate::trace::observe::{self, Observer};
use crate::trace::{AttemptStatus, BudgetBound, TraceEvent};
use crate::worker::{RunQueue, RunState};

/// How long a scrape waits for a watched queue before it reports without it.
const QUEUE_READ_LIMIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    node: String,
    outcome: &'static str,
    transience: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    node: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    node: String,
    bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HopLabels {
    from: String,
    to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    provider: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// The breaker states, in the order a gauge family lists them.
const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// Every run state, so a scrape reports zeros rather than leaving a
/// drained state at its last count.
const RUN_STATES: [RunState; 7] = [
    RunState::Queued,
    RunState::Running,
    RunState::AwaitingInput,
    RunState::Completed,
    RunState::Failed,
    RunState::Cancelled,
    RunState::Quarantined,
];

/// This process's metrics: see the [module docs](crate::metrics) for each metric.
pub struct Metrics {
    registry: Registry,
    runs_finished: Family<OutcomeLabel, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    timeouts: Family<KindLabels, Counter>,
    retries: Family<NodeLabel, Counter>,
    retries_skipped: Family<BoundLabels, Counter>,
    cache_hits: Family<NodeLabel, Counter>,
    cache_misses: Family<NodeLabel, Counter>,
    hops: Family<HopLabels, Counter>,
    breakers: Family<BreakerLabels, Gauge>,
    claims: Counter,
    releases: Family<OutcomeLabel, Counter>,
    abandons: Counter,
    renewal_lag: Histogram,
    runs: Family<StateLabel, Gauge>,
    queue_depth: Gauge,
    oldest_queued: Gauge<f64, AtomicU64>,
    fleet_claims: Counter,
    fleet_takeovers: Counter,
    fleet_abandons: Counter,
    queue_read_errors: Counter,
    spans_dropped: Counter,
    queues: Mutex<Vec<Arc<dyn RunQueue>>>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("watched_queues", &self.watched().len())
            .finish_non_exhaustive()
    }
}

static INSTALLED: OnceLock<Arc<Metrics>> = OnceLock::new();

impl Metrics {
    /// The process's metrics, counting from the first call on: every
    /// engine, fallback chain, circuit breaker and worker pool of the
    /// process reports to them. Later calls return the same value.
    pub fn install() -> Arc<Metrics> {
        INSTALLED
            .get_or_init(|| {
                let metrics = Arc::new(Metrics::new());
                observe::install(metrics.clone());
                metrics
            })
            .clone()
    }

    fn new() -> Self {
        let mut registry = Registry::default();
        let mut counter = |name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let claims = counter("aegis_worker_claims", "Runs this process's workers claimed");
        let abandons = counter(
            "aegis_worker_abandons",
            "Runs this process's workers gave up after losing the lease",
        );
        let fleet_claims = counter(
            "aegis_fleet_claims",
            "Claims every worker made, as the watched queues record them",
        );
        let fleet_takeovers = counter(
            "aegis_fleet_takeovers",
            "Claims that took a run over from an expired lease, as the watched queues record them",
        );
        let fleet_abandons = counter(
            "aegis_fleet_abandons",
            "Claims their worker gave up after losing the lease, as the watched queues record them",
        );
        let queue_read_errors = counter(
            "aegis_queue_read_errors",
            "Scrapes whose read of a watched queue failed or timed out",
        );
        let spans_dropped = counter(
            "aegis_otel_spans_dropped",
            "Finished spans dropped because the trace export queue was full (feature otel)",
        );
        let renewal_lag =
            Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0]);
        registry.register(
            "aegis_lease_renewal_lag_seconds",
            "How long after it was due each lease renewal was confirmed",
            renewal_lag.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "aegis_queue_depth",
            "Queued runs in the watched queues",
            queue_depth.clone(),
        );
        let oldest_queued = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "aegis_queue_oldest_queued_run_age_seconds",
            "How long the oldest queued run of the watched queues has been queued (0 when none is)",
            oldest_queued.clone(),
        );
        let m = Metrics {
            runs_finished: Family::default(),
            attempts: Family::default(),
            timeouts: Family::default(),
            retries: Family::default(),
            retries_skipped: Family::default(),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
            hops: Family::default(),
            breakers: Family::default(),
            claims,
            releases: Family::default(),
            abandons,
            renewal_lag,
            runs: Family::default(),
            queue_depth,
            oldest_queued,
            fleet_claims,
            fleet_takeovers,
            fleet_abandons,
            queue_read_errors,
            spans_dropped,
            queues: Mutex::new(Vec::new()),
            registry,
        };
        let mut registry = m.registry;
        registry.register(
            "aegis_runs_finished",
            "Start or resume calls ended, by outcome",
            m.runs_finished.clone(),
        );
        registry.register(
            "aegis_attempts",
            "Node attempts ended, by node, outcome and a failure's transience",
            m.attempts.clone(),
        );
        registry.register(
            "aegis_attempt_timeouts",
            "Node attempts cut by a timeout, by node and kind",
            m.timeouts.clone(),
        );
        registry.register(
            "aegis_retries",
            "Retries scheduled, by node",
            m.retries.clone(),
        );
        registry.register(
            "aegis_retries_skipped",
            "Retries not begun because their wait would overrun a deadline, by node and deadline",
            m.retries_skipped.clone(),
        );
        registry.register(
            "aegis_cache_hits",
            "Node cache lookups that served an entry, by node",
            m.cache_hits.clone(),
        );
        registry.register(
            "aegis_cache_misses",
            "Node cache lookups that found nothing to serve, by node",
            m.cache_misses.clone(),
        );
        registry.register(
            "aegis_fallback_hops",
            "Fallback chain hops, by the provider that failed and the one tried next",
            m.hops.clone(),
        );
        registry.register(
            "aegis_circuit_breaker_state",
            "1 for each provider's circuit breaker state, 0 for its other states",
            m.breakers.clone(),
        );
        registry.register(
            "aegis_worker_releases",
            "Runs this process's workers released, by outcome",
            m.releases.clone(),
        );
        registry.register(
            "aegis_runs",
            "Runs in the watched queues, by state",
            m.runs.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Reads `queue` at each scrape: its runs by state, its depth, its
    /// oldest queued run's age, and the fleet's claims, takeovers and
    /// abandons. A queue that cannot tell
    /// ([`RunQueue::stats`] is `None`) adds nothing.
    pub fn watch_queue(&self, queue: Arc<dyn RunQueue>) {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(queue);
    }

    fn watched(&self) -> Vec<Arc<dyn RunQueue>> {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every metric in the OpenMetrics text format, the watched queues read
    /// first (each within two seconds; one that fails or does not answer
    /// counts in `aegis_queue_read_errors_total` and keeps its last values).
    pub async fn render(&self) -> String {
        self.read_queues().await;
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    async fn read_queues(&self) {
        let queues = self.watched();
        if queues.is_empty() {
            return;
        }
        let mut runs = [0u64; RUN_STATES.len()];
        let (mut claims, mut takeovers, mut abandons) = (0u64, 0u64, 0u64);
        let mut oldest = Duration::ZERO;
        let mut read_any = false;
        for queue in queues {
            match tokio::time::timeout(QUEUE_READ_LIMIT, queue.stats()).await {
                Ok(Ok(Some(stats))) => {
                    read_any = true;
                    for (i, state) in RUN_STATES.iter().enumerate() {
                        runs[i] = runs[i].saturating_add(stats.runs_in(*state));
                    }
                    claims = claims.saturating_add(stats.claims);
                    takeovers = takeovers.saturating_add(stats.takeovers);
                    abandons = abandons.saturating_add(stats.abandons);
                    oldest = oldest.max(stats.oldest_queued_age.unwrap_or_default());
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "aegis metrics: reading the queue failed");
                    self.queue_read_errors.inc();
                    return;
                }
                Err(_) => {
                    tracing::warn!("aegis metrics: the queue did not answer in time");
                    self.queue_read_errors.inc();
                    return;
                }
            }
        }
        if !read_any {
            return;
        }
        for (state, n) in RUN_STATES.iter().zip(runs) {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.runs
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(n);
        }
        let queued = runs[0];
        self.queue_depth
            .set(i64::try_from(queued).unwrap_or(i64::MAX));
        self.oldest_queued.set(oldest.as_secs_f64());
        // Counters only move up: the queue's count is the truth, the
        // counter catches up to it.
        for (counter, total) in [
            (&self.fleet_claims, claims),
            (&self.fleet_takeovers, takeovers),
            (&self.fleet_abandons, abandons),
        ] {
            let behind = total.saturating_sub(counter.get());
            if behind > 0 {
                counter.inc_by(behind);
            }
        }
    }

    /// Serves [`Metrics::render`] at `GET /metrics` on `addr` (port 0 picks
    /// a free one; [`MetricsServer::local_addr`] says which) until the
    /// returned server is dropped. Must be called within a tokio runtime.
    pub async fn serve(
        self: &Arc<Self>,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<MetricsServer> {
        MetricsServer::bind(self.clone(), addr).await
    }
}

fn node(node_id: &NodeId) -> String {
    node_id.as_str().to_string()
}

fn transience(t: Transience) -> &'static str {
    match t {
        Transience::Transient => "transient",
        Transience::Permanent => "permanent",
        Transience::Unknown => "unknown",
    }
}

fn timeout_kind(kind: TimeoutKind) -> &'static str {
    match kind {
        TimeoutKind::Run => "run",
        TimeoutKind::Idle => "idle",
        TimeoutKind::EngineRun => "engine_run",
    }
}

impl Observer for Metrics {
    fn event(&self, event: &TraceEvent) {
        match event {
            TraceEvent::NodeFinished {
                node_id,
                status,
                cache_hit: false,
                ..
            } => {
                let (outcome, t) = match status {
                    AttemptStatus::Succeeded => ("succeeded", "none"),
                    AttemptStatus::Failed(e) => ("failed", transience(e.transience)),
                    AttemptStatus::Skipped { .. } => ("skipped", "none"),
                };
                if let AttemptStatus::Failed(e) = status
                    && let NodeErrorSource::Timeout(kind) = &e.source
                {
                    self.timeouts
                        .get_or_create(&KindLabels {
                            node: node(node_id),
                            kind: timeout_kind(*kind),
                        })
                        .inc();
                }
                self.attempts
                    .get_or_create(&AttemptLabels {
                        node: node(node_id),
                        outcome,
                        transience: t,
                    })
                    .inc();
            }
            TraceEvent::RetryScheduled { node_id, .. }
            | TraceEvent::TaskRetryScheduled { node_id, .. } => {
                self.retries
                    .get_or_create(&NodeLabel {
                        node: node(node_id),
                    })
                    .inc();
            }
            TraceEvent::RetrySkipped { node_id, bound, .. } => {
                let bound = match bound {
                    BudgetBound::EnclosingDeadline => "enclosing_deadline",
                    _ => "run_budget",
                };
                self.retries_skipped
                    .get_or_create(&BoundLabels {
                        node: node(node_id),
                        bound,
                    })
                    .inc();
            }
            TraceEvent::RunFinished { outcome, .. } => {
                self.runs_finished
                    .get_or_create(&OutcomeLabel { outcome })
                    .inc();
            }
            _ => {}
        }
    }

    fn cache_lookup(&self, node_id: &NodeId, hit: bool) {
        let family = if hit {
            &self.cache_hits
        } else {
            &self.cache_misses
        };
        family
            .get_or_create(&NodeLabel {
                node: node(node_id),
            })
            .inc();
    }

    fn hop(&self, from: &str, to: &str) {
        self.hops
            .get_or_create(&HopLabels {
                from: from.to_string(),
                to: to.to_string(),
            })
            .inc();
    }

    fn breaker(&self, provider: &str, state: &'static str) {
        for s in BREAKER_STATES {
            self.breakers
                .get_or_create(&BreakerLabels {
                    provider: provider.to_string(),
                    state: s,
                })
                .set(i64::from(s == state));
        }
    }

    fn claimed(&self, count: usize) {
        self.claims.inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    fn released(&self, outcome: &'static str) {
        self.releases.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    fn abandoned(&self) {
        self.abandons.inc();
    }

    fn renewed(&self, lag: Duration) {
        self.renewal_lag.observe(lag.as_secs_f64());
    }

    fn span_dropped(&self) {
        self.spans_dropped.inc();
    }
}
