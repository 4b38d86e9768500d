//! The records a run queue keeps: runs, leases, claims, workers, attempts.

use serde_json::Value;
use std::fmt;

use crate::graph::ParleyResponse;

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
pub struct Lease {
    /// The thread.
    pub thread_id: String,
    /// The fencing token.
    pub epoch: u64,
    /// The worker holding it.
    pub worker_id: String,
}

/// What a claim hands a worker: the lease and what it needs to run.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The lease.
    pub lease: Lease,
    /// The graph the thread runs, by registered name.
    pub graph_name: String,
    /// The input the thread was submitted with (used when it has no
    /// waypoint yet).
    pub input: Value,
    /// A parley answer waiting to be delivered on resume.
    pub answer: Option<ParleyResponse>,
}

/// A graph a worker can run: its name and its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphKey {
    /// The registered name.
    pub name: String,
    /// [`WarGraph::fingerprint`](crate::WarGraph::fingerprint).
    pub fingerprint: String,
}

/// A worker as the queue sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Unique per worker process (and per start of it).
    pub worker_id: String,
    /// The graphs it runs.
    pub graphs: Vec<GraphKey>,
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
}

impl Release {
    pub(crate) fn state(&self) -> RunState {
        match self {
            Release::Completed => RunState::Completed,
            Release::Failed { .. } => RunState::Failed,
            Release::AwaitingInput => RunState::AwaitingInput,
            Release::Halted => RunState::Queued,
            Release::Cancelled => RunState::Cancelled,
        }
    }

    pub(crate) fn error(&self) -> Option<&str> {
        match self {
            Release::Failed { error } => Some(error),
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
        }
    }
}

/// What a heartbeat learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    /// Someone asked to cancel the run: halt it and release it as
    /// cancelled.
    pub cancel_requested: bool,
}

/// Whether `submit` created the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// A new run was queued.
    New,
    /// A run of that thread already existed (same graph): nothing changed.
    Existing,
}

/// A run as [`Client::status`](super::Client::status) reports it.
#[derive(Debug, Clone, PartialEq)]
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
    /// graph, or none with its fingerprint). `None` when some live worker
    /// could claim it.
    pub waiting_reason: Option<String>,
}

/// One claim of a thread, kept for inspection: who held which epoch and
/// how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptInfo {
    /// The epoch of the claim.
    pub epoch: u64,
    /// The worker that claimed.
    pub worker_id: String,
    /// `running` while held; then `completed`, `failed`, `awaiting_input`,
    /// `halted`, `cancelled`, or `abandoned` (the lease was lost: the
    /// worker wrote nothing more), or `expired` (taken over by a later
    /// claim without the holder reporting back).
    pub outcome: String,
}

/// The reason shown for a queued run no live worker can take.
pub(crate) fn waiting_reason(
    graph_name: &str,
    fingerprint: Option<&str>,
    live: &[WorkerInfo],
) -> Option<String> {
    let by_name: Vec<&GraphKey> = live
        .iter()
        .flat_map(|w| w.graphs.iter())
        .filter(|g| g.name == graph_name)
        .collect();
    if by_name.is_empty() {
        return Some(format!("no live worker runs graph `{graph_name}`"));
    }
    match fingerprint {
        Some(fp) if !by_name.iter().any(|g| g.fingerprint == fp) => Some(format!(
            "no live worker runs graph `{graph_name}` with fingerprint {fp} (the thread started on it; workers have {})",
            by_name
                .iter()
                .map(|g| g.fingerprint.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => None,
    }
}

/// Whether a worker with `graphs` may run a thread of `graph_name` bound to
/// `fingerprint` (unbound: any fingerprint), and the fingerprint it binds.
pub(crate) fn matching_fingerprint<'a>(
    graphs: &'a [GraphKey],
    graph_name: &str,
    fingerprint: Option<&str>,
) -> Option<&'a str> {
    graphs
        .iter()
        .find(|g| g.name == graph_name && fingerprint.is_none_or(|f| f == g.fingerprint))
        .map(|g| g.fingerprint.as_str())
}
