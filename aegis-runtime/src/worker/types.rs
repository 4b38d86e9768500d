//! The records a run queue keeps: runs, leases, claims, workers, attempts.

use serde_json::Value;
use std::fmt;
use std::time::Duration;

use crate::graph::{ParleyResponse, WarGraph};

/// Where a submitted run stands in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunState {
    /// Waiting for a worker (new, released at shutdown, or answered).
    Queued,
    /// Leased by a worker. A lease past its expiry is claimable again.
    Running,
    /// Waiting for a parley answer ([`Client::answer`](super::Client::answer)).
    AwaitingInput,
    /// Finished: the last waypoint is `Completed`.
    Completed,
    /// Finished: the last waypoint is `Failed` (or the run could not start).
    Failed,
    /// Cancelled through [`Client::cancel`](super::Client::cancel).
    Cancelled,
    /// Set aside: [`MAX_UNREADABLE_CLAIMS`] claims in a row found its
    /// waypoints or its parley answer unreadable ([`RunStatus::fault`] says
    /// how). No worker claims it until an operator repairs the rows and
    /// calls [`Client::requeue`](super::Client::requeue).
    Quarantined,
}

impl RunState {
    /// The state's name as stored (`queued`, `running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::AwaitingInput => "awaiting_input",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::Quarantined => "quarantined",
        }
    }

    /// The state named `name`, as [`RunState::as_str`] spells it.
    pub fn parse(name: &str) -> Option<RunState> {
        Some(match name {
            "queued" => RunState::Queued,
            "running" => RunState::Running,
            "awaiting_input" => RunState::AwaitingInput,
            "completed" => RunState::Completed,
            "failed" => RunState::Failed,
            "cancelled" => RunState::Cancelled,
            "quarantined" => RunState::Quarantined,
            _ => return None,
        })
    }

    /// Whether the run is over (completed, failed or cancelled).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Cancelled
        )
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A worker's hold on one thread. The epoch is the fencing token: every
/// claim of a thread gets a strictly larger one, and every waypoint written
/// under the lease is conditional on it still being the thread's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The thread.
    pub thread_id: String,
    /// The fencing token.
    pub epoch: u64,
    /// The worker holding it.
    pub worker_id: String,
}

impl Lease {
    /// `worker_id`'s lease on `thread_id` at fencing token `epoch` (what a
    /// [`RunQueue`](super::RunQueue) hands out on a claim).
    pub fn new(thread_id: impl Into<String>, epoch: u64, worker_id: impl Into<String>) -> Self {
        Lease {
            thread_id: thread_id.into(),
            epoch,
            worker_id: worker_id.into(),
        }
    }
}

/// What a claim hands a worker: the lease and what it needs to run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Claim {
    /// The lease.
    pub lease: Lease,
    /// The graph the thread runs, by registered name.
    pub graph_name: String,
    /// The input the thread was submitted with (used when it has no
    /// waypoint yet); `Null` when [`Claim::fault`] says it is unreadable.
    pub input: Value,
    /// A parley answer waiting to be delivered on resume.
    pub answer: Option<ParleyResponse>,
    /// The stored input or answer could not be read: the worker releases
    /// the thread as [`Release::Poisoned`] rather than run it without them.
    pub fault: Option<RunFault>,
}

impl Claim {
    /// A claim of `lease`'s thread, a run of `graph_name` with `input` and,
    /// when one waits, the parley `answer`.
    pub fn new(
        lease: Lease,
        graph_name: impl Into<String>,
        input: Value,
        answer: Option<ParleyResponse>,
    ) -> Self {
        Claim {
            lease,
            graph_name: graph_name.into(),
            input,
            answer,
            fault: None,
        }
    }

    /// A claim from the run's stored input and answer, as a queue keeps
    /// them (JSON text): one that does not parse is left out and named in
    /// [`Claim::fault`].
    pub(crate) fn from_stored(
        lease: Lease,
        graph_name: String,
        input: &str,
        answer: Option<&str>,
    ) -> Self {
        let mut claim = Claim::new(lease, graph_name, Value::Null, None);
        match serde_json::from_str::<Value>(input) {
            Ok(value) if value.is_object() => claim.input = value,
            Ok(other) => {
                claim.fault = Some(RunFault::UnreadableInput {
                    message: format!("a JSON object was expected, found {}", json_kind(&other)),
                })
            }
            Err(e) => {
                claim.fault = Some(RunFault::UnreadableInput {
                    message: e.to_string(),
                })
            }
        }
        if let Some(answer) = answer {
            match serde_json::from_str::<ParleyResponse>(answer) {
                Ok(response) => claim.answer = Some(response),
                Err(e) => {
                    claim.fault = Some(RunFault::UnreadableAnswer {
                        message: e.to_string(),
                    })
                }
            }
        }
        claim
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How many claims in a row may find a thread's waypoints or answer
/// unreadable before it is quarantined ([`RunState::Quarantined`]). The
/// claims between are spaced by [`unreadable_backoff`], so a poisoned
/// thread costs the fleet this many claims, not a claim per poll.
pub const MAX_UNREADABLE_CLAIMS: u32 = 3;

/// The wait before the next claim of a thread that `count` claims in a
/// row found unreadable: 1 s, then 5 s (a transient read failure gets
/// another chance; a corrupt row is quarantined within seconds).
pub fn unreadable_backoff(count: u32) -> Duration {
    Duration::from_secs(5u64.saturating_pow(count.saturating_sub(1)).min(3600))
}

/// Why a thread could not be run as it is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunFault {
    /// The input it was submitted with is not a readable JSON object. The
    /// run fails at once: no retry can read it.
    #[error("the run's stored input is unreadable: {message}")]
    UnreadableInput {
        /// Why it cannot be read.
        message: String,
    },
    /// Its latest waypoint cannot be read (corrupt, or of a newer format).
    #[error("the thread's waypoints are unreadable: {message}")]
    UnreadableWaypoint {
        /// The store's error.
        message: String,
    },
    /// The parley answer delivered to it cannot be read.
    #[error("the parley answer delivered to the thread is unreadable: {message}")]
    UnreadableAnswer {
        /// Why it cannot be read.
        message: String,
    },
}

impl RunFault {
    /// The fault's kind as stored: `input`, `waypoint` or `answer`.
    pub fn kind(&self) -> &'static str {
        match self {
            RunFault::UnreadableInput { .. } => "input",
            RunFault::UnreadableWaypoint { .. } => "waypoint",
            RunFault::UnreadableAnswer { .. } => "answer",
        }
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        match self {
            RunFault::UnreadableInput { message }
            | RunFault::UnreadableWaypoint { message }
            | RunFault::UnreadableAnswer { message } => message,
        }
    }

    /// The fault of `kind` (as [`RunFault::kind`] names it) saying
    /// `message`; `None` for an unknown kind.
    pub fn parse(kind: &str, message: impl Into<String>) -> Option<RunFault> {
        let message = message.into();
        Some(match kind {
            "input" => RunFault::UnreadableInput { message },
            "waypoint" => RunFault::UnreadableWaypoint { message },
            "answer" => RunFault::UnreadableAnswer { message },
            _ => return None,
        })
    }

    /// Where a release for this fault leaves the run, the `count`th claim
    /// in a row to find it: failed (an unreadable input), quarantined (the
    /// last allowed claim), or queued again after the returned wait.
    pub(crate) fn next(&self, count: u32) -> (RunState, Option<Duration>) {
        match self {
            RunFault::UnreadableInput { .. } => (RunState::Failed, None),
            _ if count >= MAX_UNREADABLE_CLAIMS => (RunState::Quarantined, None),
            _ => (RunState::Queued, Some(unreadable_backoff(count))),
        }
    }
}

/// A graph a worker can run: its name, its fingerprint and its migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphKey {
    /// The registered name.
    pub name: String,
    /// [`WarGraph::fingerprint`](crate::graph::WarGraph::fingerprint).
    pub fingerprint: String,
    /// A digest of the graph's registered migrations (empty when it has
    /// none). Migrations are not part of the fingerprint, yet they decide
    /// which threads of other graphs this graph can continue, so the
    /// verdicts a worker records name both.
    pub migrations: String,
}

impl GraphKey {
    /// The key of `graph` registered as `name`.
    pub fn of(name: impl Into<String>, graph: &WarGraph) -> Self {
        GraphKey {
            name: name.into(),
            fingerprint: graph.fingerprint(),
            migrations: graph.migrations_digest(),
        }
    }

    /// A key from its parts: a graph `name` with `fingerprint` and no
    /// migrations (set them with [`GraphKey::with_migrations`]).
    pub fn new(name: impl Into<String>, fingerprint: impl Into<String>) -> Self {
        GraphKey {
            name: name.into(),
            fingerprint: fingerprint.into(),
            migrations: String::new(),
        }
    }

    /// Sets [`GraphKey::migrations`].
    #[must_use]
    pub fn with_migrations(mut self, migrations: impl Into<String>) -> Self {
        self.migrations = migrations.into();
        self
    }
}

/// A worker's judgement of whether its graph can continue a thread that
/// another graph (of the same name) ran last, as `resume` would judge it:
/// recorded in the queue so that the thread is claimed only by a worker
/// that can run it, and judged once per claim of the thread (its epoch),
/// not once per poll.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The thread.
    pub thread_id: String,
    /// The thread's epoch when it was judged: a later claim (which may
    /// change where it waits) makes the verdict stale.
    pub epoch: u64,
    /// The fingerprint of the judging graph.
    pub fingerprint: String,
    /// The judging graph's [`GraphKey::migrations`].
    pub migrations: String,
    /// The fingerprint the thread was pinned to when judged.
    pub pinned_to: String,
    /// Whether the judging graph can continue the thread.
    pub compatible: bool,
    /// The migration that carries it, when one does.
    pub migration: Option<String>,
    /// Why it cannot (the `GraphMismatch` message), when it cannot.
    pub reason: Option<String>,
}

impl Verdict {
    /// `graph` can continue the thread `run` describes, carried by
    /// `migration` if a migration is needed.
    pub fn compatible(run: &PinnedRun, graph: &GraphKey, migration: Option<String>) -> Self {
        Verdict {
            thread_id: run.thread_id.clone(),
            epoch: run.epoch,
            fingerprint: graph.fingerprint.clone(),
            migrations: graph.migrations.clone(),
            pinned_to: run.fingerprint.clone(),
            compatible: true,
            migration,
            reason: None,
        }
    }

    /// `graph` cannot continue the thread `run` describes, because of
    /// `reason`.
    pub fn incompatible(run: &PinnedRun, graph: &GraphKey, reason: impl Into<String>) -> Self {
        Verdict {
            thread_id: run.thread_id.clone(),
            epoch: run.epoch,
            fingerprint: graph.fingerprint.clone(),
            migrations: graph.migrations.clone(),
            pinned_to: run.fingerprint.clone(),
            compatible: false,
            migration: None,
            reason: Some(reason.into()),
        }
    }

    /// Whether this verdict is `graph`'s.
    pub(crate) fn is_by(&self, graph: &GraphKey) -> bool {
        self.fingerprint == graph.fingerprint && self.migrations == graph.migrations
    }
}

/// A run bound to a graph fingerprint: one a worker is asked to judge
/// ([`RunQueue::unjudged`](super::RunQueue::unjudged)), or one no live
/// worker runs the fingerprint of ([`Client::pinned`](super::Client::pinned)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinnedRun {
    /// The thread.
    pub thread_id: String,
    /// The graph's registered name.
    pub graph_name: String,
    /// Where it stands: queued (or answered), awaiting input, or running
    /// under an expired lease.
    pub state: RunState,
    /// Its epoch.
    pub epoch: u64,
    /// The fingerprint it is pinned to: the graph that ran it last.
    pub fingerprint: String,
    /// What live workers' graphs judged at this epoch (empty for a run
    /// handed out to be judged, and while nobody has judged it).
    pub verdicts: Vec<Verdict>,
}

impl PinnedRun {
    /// A run pinned to `fingerprint`, with no verdicts.
    pub fn new(
        thread_id: impl Into<String>,
        graph_name: impl Into<String>,
        state: RunState,
        epoch: u64,
        fingerprint: impl Into<String>,
    ) -> Self {
        PinnedRun {
            thread_id: thread_id.into(),
            graph_name: graph_name.into(),
            state,
            epoch,
            fingerprint: fingerprint.into(),
            verdicts: Vec::new(),
        }
    }
}

/// A worker as the queue sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Unique per worker process (and per start of it).
    pub worker_id: String,
    /// The graphs it runs.
    pub graphs: Vec<GraphKey>,
}

impl WorkerInfo {
    /// Worker `worker_id`, running `graphs`.
    pub fn new(worker_id: impl Into<String>, graphs: Vec<GraphKey>) -> Self {
        WorkerInfo {
            worker_id: worker_id.into(),
            graphs,
        }
    }
}

/// How a lease ends.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Release {
    /// The run completed.
    Completed,
    /// The run failed (or could not start).
    Failed {
        /// Why, for [`RunStatus::error`].
        error: String,
    },
    /// The run waits for a parley answer.
    AwaitingInput,
    /// The run halted (graceful shutdown): back in the queue.
    Halted,
    /// The run was cancelled on request.
    Cancelled,
    /// The thread could not be run as stored (see [`RunFault`]): failed at
    /// once for an unreadable input; otherwise queued again after a
    /// backoff, and quarantined after [`MAX_UNREADABLE_CLAIMS`] such claims
    /// in a row.
    Poisoned(RunFault),
}

impl Release {
    pub(crate) fn state(&self) -> RunState {
        match self {
            Release::Completed => RunState::Completed,
            Release::Failed { .. } => RunState::Failed,
            Release::AwaitingInput => RunState::AwaitingInput,
            Release::Halted => RunState::Queued,
            Release::Cancelled => RunState::Cancelled,
            // The queue decides by how many claims found it so (`RunFault::next`).
            Release::Poisoned(_) => RunState::Queued,
        }
    }

    pub(crate) fn error(&self) -> Option<String> {
        match self {
            Release::Failed { error } => Some(error.clone()),
            Release::Poisoned(fault) => Some(fault.to_string()),
            _ => None,
        }
    }

    /// The attempt outcome recorded for this release.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Release::Completed => "completed",
            Release::Failed { .. } => "failed",
            Release::AwaitingInput => "awaiting_input",
            Release::Halted => "halted",
            Release::Cancelled => "cancelled",
            Release::Poisoned(_) => "unreadable",
        }
    }
}

/// What a heartbeat learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal {
    /// Someone asked to cancel the run: halt it and release it as
    /// cancelled.
    pub cancel_requested: bool,
}

impl Renewal {
    /// A renewal answer; `cancel_requested` asks the worker to stop the run.
    pub fn new(cancel_requested: bool) -> Self {
        Renewal { cancel_requested }
    }
}

/// Whether `submit` created the run.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): a submission either
/// created the run or found it there already (submitting is idempotent per
/// thread); there is no third answer to add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// A new run was queued.
    New,
    /// A run of that thread already existed (same graph): nothing changed.
    Existing,
}

/// A run as [`Client::status`](super::Client::status) reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunStatus {
    /// The thread.
    pub thread_id: String,
    /// The graph's registered name.
    pub graph_name: String,
    /// Where it stands.
    pub state: RunState,
    /// The newest lease epoch (0: never claimed).
    pub epoch: u64,
    /// The worker holding the lease, while one does.
    pub worker_id: Option<String>,
    /// The graph fingerprint the thread is bound to (set at its first
    /// claim: afterwards only a worker with this exact graph resumes it).
    pub fingerprint: Option<String>,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// Why a queued run is not being picked up (no live worker runs its
    /// graph, or none with its fingerprint and no live graph of its name
    /// can continue it, with the reason each gave). `None` when some live
    /// worker could claim it.
    pub waiting_reason: Option<String>,
    /// The fingerprint the thread ran on before its latest move onto
    /// another graph (a rolling deploy): `None` while it never moved.
    pub previous_fingerprint: Option<String>,
    /// The migration that carried its latest move, when one did.
    pub migration: Option<String>,
    /// Why the latest claims could not run the thread as stored, while
    /// they could not (cleared by a claim that could, and by
    /// [`Client::requeue`](super::Client::requeue)).
    pub fault: Option<RunFault>,
}

impl RunStatus {
    /// Sets [`worker_id`](Self::worker_id): the worker holding the lease, while one
    /// does.
    #[must_use]
    pub fn with_worker_id(mut self, worker_id: Option<impl Into<String>>) -> Self {
        self.worker_id = worker_id.map(Into::into);
        self
    }

    /// Sets [`fingerprint`](Self::fingerprint): the graph fingerprint the thread is
    /// bound to (set at its first claim: afterwards only a worker with this
    /// exact graph resumes it).
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: Option<impl Into<String>>) -> Self {
        self.fingerprint = fingerprint.map(Into::into);
        self
    }

    /// Sets [`error`](Self::error): why a failed run failed.
    #[must_use]
    pub fn with_error(mut self, error: Option<impl Into<String>>) -> Self {
        self.error = error.map(Into::into);
        self
    }

    /// Sets [`waiting_reason`](Self::waiting_reason): why a queued run is not being
    /// picked up (no live worker runs its graph, or none with its fingerprint
    /// and no live graph of its name can continue it, with the reason each
    /// gave).
    #[must_use]
    pub fn with_waiting_reason(mut self, waiting_reason: Option<impl Into<String>>) -> Self {
        self.waiting_reason = waiting_reason.map(Into::into);
        self
    }

    /// Sets [`previous_fingerprint`](Self::previous_fingerprint): the fingerprint
    /// the thread ran on before its latest move onto another graph (a rolling
    /// deploy): `None` while it never moved.
    #[must_use]
    pub fn with_previous_fingerprint(
        mut self,
        previous_fingerprint: Option<impl Into<String>>,
    ) -> Self {
        self.previous_fingerprint = previous_fingerprint.map(Into::into);
        self
    }

    /// Sets [`migration`](Self::migration): the migration that carried its latest
    /// move, when one did.
    #[must_use]
    pub fn with_migration(mut self, migration: Option<impl Into<String>>) -> Self {
        self.migration = migration.map(Into::into);
        self
    }

    /// Sets [`fault`](Self::fault): why the latest claims could not run the thread
    /// as stored, while they could not (cleared by a claim that could, and by
    /// [`Client::requeue`](super::Client::requeue)).
    #[must_use]
    pub fn with_fault(mut self, fault: impl Into<Option<RunFault>>) -> Self {
        self.fault = fault.into();
        self
    }
}

impl RunStatus {
    /// The status of `thread_id` (a run of `graph_name`) in `state` at
    /// fencing token `epoch`, every optional detail unset (set them with the
    /// `with_*` builders).
    pub fn new(
        thread_id: impl Into<String>,
        graph_name: impl Into<String>,
        state: RunState,
        epoch: u64,
    ) -> Self {
        RunStatus {
            thread_id: thread_id.into(),
            graph_name: graph_name.into(),
            state,
            epoch,
            worker_id: None,
            fingerprint: None,
            error: None,
            waiting_reason: None,
            previous_fingerprint: None,
            migration: None,
            fault: None,
        }
    }
}

/// One claim of a thread, kept for inspection: who held which epoch and
/// how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptInfo {
    /// The epoch of the claim.
    pub epoch: u64,
    /// The worker that claimed.
    pub worker_id: String,
    /// `running` while held; then `completed`, `failed`, `awaiting_input`,
    /// `halted`, `cancelled`, `unreadable` (the thread could not be run as
    /// stored: [`RunStatus::fault`]), or `abandoned` (the lease was lost:
    /// the worker wrote nothing more), or `expired` (taken over by a later
    /// claim without the holder reporting back).
    pub outcome: String,
}

impl AttemptInfo {
    /// The claim at `epoch` by `worker_id`, which ended as `outcome`.
    pub fn new(epoch: u64, worker_id: impl Into<String>, outcome: impl Into<String>) -> Self {
        AttemptInfo {
            epoch,
            worker_id: worker_id.into(),
            outcome: outcome.into(),
        }
    }
}

/// The reason shown for a queued run no live worker can take: `None` when
/// some live worker runs its graph with its fingerprint (or it is unbound),
/// or judged that its graph can continue it (`verdicts`: the thread's
/// verdicts at its current epoch).
pub(crate) fn waiting_reason(
    graph_name: &str,
    fingerprint: Option<&str>,
    live: &[WorkerInfo],
    verdicts: &[Verdict],
) -> Option<String> {
    let by_name: Vec<&GraphKey> = live
        .iter()
        .flat_map(|w| w.graphs.iter())
        .filter(|g| g.name == graph_name)
        .collect();
    if by_name.is_empty() {
        return Some(format!("no live worker runs graph `{graph_name}`"));
    }
    let fp = fingerprint?;
    if by_name.iter().any(|g| g.fingerprint == fp) {
        return None;
    }
    if by_name
        .iter()
        .any(|g| verdicts.iter().any(|v| v.is_by(g) && v.compatible))
    {
        return None;
    }
    let mut seen: Vec<&GraphKey> = Vec::new();
    for g in by_name {
        if !seen
            .iter()
            .any(|s| s.fingerprint == g.fingerprint && s.migrations == g.migrations)
        {
            seen.push(g);
        }
    }
    let judged: Vec<String> = seen
        .iter()
        .map(|g| match verdicts.iter().find(|v| v.is_by(g)) {
            Some(v) => format!(
                "{} cannot continue it: {}",
                g.fingerprint,
                v.reason.as_deref().unwrap_or("incompatible")
            ),
            None => format!("{} has not judged it yet", g.fingerprint),
        })
        .collect();
    Some(format!(
        "no live worker runs graph `{graph_name}` with fingerprint {fp}, which the thread is pinned to; of the live graphs, {}",
        judged.join("; ")
    ))
}

/// Whether a worker with `graphs` may claim a thread of `graph_name` pinned
/// to `fingerprint` (unbound: any fingerprint), and the graph it runs it on:
/// its own graph of that fingerprint first; otherwise, when no live worker
/// runs the pinned fingerprint (`pinned_live`), one of its graphs whose
/// verdict at the thread's epoch (`verdicts`) is compatible.
pub(crate) fn claiming_graph<'a>(
    graphs: &'a [GraphKey],
    graph_name: &str,
    fingerprint: Option<&str>,
    pinned_live: bool,
    verdicts: &[Verdict],
) -> Option<&'a GraphKey> {
    let mut named = graphs.iter().filter(|g| g.name == graph_name);
    let exact = named
        .clone()
        .find(|g| fingerprint.is_none_or(|f| f == g.fingerprint));
    if exact.is_some() || pinned_live {
        return exact;
    }
    named.find(|g| verdicts.iter().any(|v| v.is_by(g) && v.compatible))
}

/// Whether some worker in `live` runs `graph_name` with `fingerprint`.
pub(crate) fn runs_fingerprint(live: &[WorkerInfo], graph_name: &str, fingerprint: &str) -> bool {
    live.iter()
        .flat_map(|w| w.graphs.iter())
        .any(|g| g.name == graph_name && g.fingerprint == fingerprint)
}

/// Whether `worker` should judge a run of `graph_name` pinned to
/// `fingerprint` at `epoch`: it runs a graph of that name with another
/// fingerprint that has no verdict on the run at this epoch yet. Returns
/// that graph.
pub(crate) fn to_judge<'a>(
    worker: &'a WorkerInfo,
    graph_name: &str,
    fingerprint: &str,
    verdicts: &[Verdict],
) -> Option<&'a GraphKey> {
    worker.graphs.iter().find(|g| {
        g.name == graph_name && g.fingerprint != fingerprint && !verdicts.iter().any(|v| v.is_by(g))
    })
}

/// The queue at a glance, for metrics ([`RunQueue::stats`](super::RunQueue::stats)):
/// how many runs are in each state, and how the claims so far ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Runs per state, each state listed once (a state with no run may be
    /// missing). The queue's depth is the `Queued` count.
    pub runs: Vec<(RunState, u64)>,
    /// Claims ever made (one per epoch of every thread).
    pub claims: u64,
    /// Claims that took a run over from a holder whose lease expired (the
    /// earlier claim's outcome is `expired`).
    pub takeovers: u64,
    /// Claims given up by their worker after it lost the lease
    /// (`abandoned`).
    pub abandons: u64,
    /// How long the oldest queued run has been queued: since it last
    /// entered the `Queued` state (submitted, released back to the queue,
    /// requeued, or answered), by the queue's clock; `None` when no run is
    /// queued or the queue cannot tell. A run waiting for the takeover of
    /// an expired lease counts as running, not here.
    pub oldest_queued_age: Option<Duration>,
}

impl QueueStats {
    /// No run, no claim.
    pub fn new() -> Self {
        QueueStats::default()
    }

    /// Adds `count` runs in `state`.
    #[must_use]
    pub fn with_runs(mut self, state: RunState, count: u64) -> Self {
        match self.runs.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n = n.saturating_add(count),
            None => self.runs.push((state, count)),
        }
        self
    }

    /// Counts `count` claims that ended as `outcome` ([`AttemptInfo::outcome`]).
    #[must_use]
    pub fn with_claims(mut self, outcome: &str, count: u64) -> Self {
        self.claims = self.claims.saturating_add(count);
        match outcome {
            "expired" => self.takeovers = self.takeovers.saturating_add(count),
            "abandoned" => self.abandons = self.abandons.saturating_add(count),
            _ => {}
        }
        self
    }

    /// Records a queued run that has been queued for `age`: the oldest
    /// queued run's age is the longest one recorded.
    #[must_use]
    pub fn with_queued_age(mut self, age: Duration) -> Self {
        self.oldest_queued_age = Some(self.oldest_queued_age.map_or(age, |a| a.max(age)));
        self
    }

    /// The runs in `state`.
    pub fn runs_in(&self, state: RunState) -> u64 {
        self.runs
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    }
}
