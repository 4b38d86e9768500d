//! What a node sees of the engine while it runs.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::effect::EffectScope;
use super::{EffectLedger, MusterTask, NodeEmitter, ParleyResponse};
use crate::deadline::deadline_after;
use crate::id::NodeId;

/// Reports an attempt's progress to its idle timeout.
///
/// Each [`HeartbeatHandle::beat`] restarts the idle window. A handle of an
/// attempt without an idle timeout is a no-op, so nodes may beat
/// unconditionally. Clones share one heartbeat.
///
/// The handle also carries the attempt's first-chunk deadline
/// ([`TimeoutPolicy::first_chunk`](crate::policy::TimeoutPolicy::first_chunk)),
/// which a streaming LLM call reads ([`HeartbeatHandle::first_chunk`]), and
/// lets that call hold the idle window while it waits for a first chunk
/// ([`HeartbeatHandle::hold_idle`]).
#[derive(Debug, Clone, Default)]
pub struct HeartbeatHandle(Option<Arc<Beat>>, Option<Duration>);

#[derive(Debug)]
struct Beat {
    origin: Instant,
    last_nanos: AtomicU64,
    count: AtomicU64,
    /// Open [`IdleHold`]s: while any is open the idle window does not run.
    held: AtomicU64,
    /// Woken when the last hold is released.
    released: tokio::sync::Notify,
}

/// Holds an attempt's idle window while it waits for a streamed
/// completion's first chunk (see [`HeartbeatHandle::hold_idle`]). Dropping
/// it counts as progress: the window restarts from the release.
#[derive(Debug)]
#[must_use = "the idle window is held only while the guard lives"]
pub struct IdleHold(Option<Arc<Beat>>);

impl Drop for IdleHold {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            let handle = HeartbeatHandle(Some(b), None);
            handle.beat();
            if let Some(b) = &handle.0
                && b.held.fetch_sub(1, Ordering::AcqRel) == 1
            {
                b.released.notify_one();
            }
        }
    }
}

impl HeartbeatHandle {
    /// A handle that records nothing.
    pub fn noop() -> Self {
        HeartbeatHandle(None, None)
    }

    /// A handle that records beats, its window starting now.
    pub fn tracking() -> Self {
        HeartbeatHandle(
            Some(Arc::new(Beat {
                origin: Instant::now(),
                last_nanos: AtomicU64::new(0),
                count: AtomicU64::new(0),
                held: AtomicU64::new(0),
                released: tokio::sync::Notify::new(),
            })),
            None,
        )
    }

    /// This handle carrying `first_chunk` as the attempt's first-chunk
    /// deadline (`None`: none).
    pub fn with_first_chunk(mut self, first_chunk: Option<Duration>) -> Self {
        self.1 = first_chunk;
        self
    }

    /// The attempt's first-chunk deadline: how long each provider may take
    /// to deliver a streamed completion's first chunk.
    pub fn first_chunk(&self) -> Option<Duration> {
        self.1
    }

    /// Holds the idle window until the guard is dropped: a streaming call
    /// takes it while it waits for a first chunk, which its own first-chunk
    /// deadline bounds instead (per provider, so a fallback chain's hops are
    /// not cut by the idle timeout). Dropping the guard restarts the window.
    pub fn hold_idle(&self) -> IdleHold {
        if let Some(b) = &self.0 {
            b.held.fetch_add(1, Ordering::AcqRel);
        }
        IdleHold(self.0.clone())
    }

    fn is_held(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|b| b.held.load(Ordering::Acquire) > 0)
    }

    /// Reports progress.
    pub fn beat(&self) {
        if let Some(b) = &self.0 {
            let nanos = u64::try_from(b.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
            b.last_nanos.fetch_max(nanos, Ordering::Relaxed);
            b.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether beats are recorded (the attempt has an idle timeout).
    pub fn is_tracking(&self) -> bool {
        self.0.is_some()
    }

    /// How many beats were recorded.
    pub fn beats(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |b| b.count.load(Ordering::Relaxed))
    }

    /// The instant of the last beat (the handle's creation if none).
    pub(crate) fn last_beat(&self) -> Option<Instant> {
        self.0.as_ref().map(|b| {
            let since = Duration::from_nanos(b.last_nanos.load(Ordering::Relaxed));
            // The beat was measured from `origin`, so the sum is an instant
            // that existed; the fallback only keeps this total.
            b.origin.checked_add(since).unwrap_or_else(Instant::now)
        })
    }

    /// When the idle window of `idle` closes: `None` when no beats are
    /// tracked, while the window is held, or when the window is too long
    /// for an `Instant` to hold.
    pub(crate) fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if self.is_held() {
            return None;
        }
        self.last_beat().and_then(|last| deadline_after(last, idle))
    }

    /// Resolves once no beat has arrived for `idle` (never, for a window
    /// too long for an `Instant`).
    pub(crate) async fn idle_for(&self, idle: Duration) {
        let Some(b) = &self.0 else {
            return std::future::pending().await;
        };
        loop {
            if self.is_held() {
                // A release before this wait stored a permit: no lost wake.
                b.released.notified().await;
                continue;
            }
            // Not `idle_deadline`: a hold taken right after the check above
            // must not read as "no window" (a wait forever).
            let Some(deadline) = self.last_beat().and_then(|l| deadline_after(l, idle)) else {
                return std::future::pending().await;
            };
            if Instant::now() >= deadline {
                if self.is_held() {
                    continue;
                }
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = b.released.notified() => {}
            }
        }
    }
}

/// What a node sees of the engine during one attempt.
#[derive(Debug, Clone)]
pub struct NodeContext {
    pub(crate) node_id: NodeId,
    pub(crate) thread_id: Arc<str>,
    pub(crate) superstep: u32,
    pub(crate) attempt: u32,
    pub(crate) heartbeat: HeartbeatHandle,
    /// The engine's cancellation token and effect scope, shared by every
    /// attempt behind one reference count.
    pub(crate) shared: Arc<AttemptShared>,
    pub(crate) parley_response: Option<ParleyResponse>,
    pub(crate) task: Option<TaskRef>,
    /// Where [`NodeContext::emit`] and [`NodeContext::emit_token`] send.
    pub(crate) emitter: NodeEmitter,
    /// Where a Paladin attempt reports who served its answer.
    pub(crate) served: ServedSlot,
    /// Where a Paladin attempt charges what its completions spend.
    pub(crate) meter: super::SpendMeter,
}

/// What every attempt of one engine shares: its cancellation token and the
/// store's effect ledger ([`NodeContext::effect`]), behind one reference
/// count, so handing them to an attempt costs one count, not a clone of
/// the token (which locks its tree) and a second count.
#[derive(Debug)]
pub(crate) struct AttemptShared {
    pub(crate) cancellation: CancellationToken,
    pub(crate) effects: Option<Arc<EffectScope>>,
}

impl AttemptShared {
    pub(crate) fn new(
        cancellation: CancellationToken,
        effects: Option<Arc<EffectScope>>,
    ) -> Arc<Self> {
        Arc::new(AttemptShared {
            cancellation,
            effects,
        })
    }
}

/// A superstep's mustered tasks, as the attempts running them read them.
pub(crate) trait TaskSource: Send + Sync + 'static {
    /// The task at `index`, if there is one.
    fn task(&self, index: usize) -> Option<&MusterTask>;
}

/// One task of a [`TaskSource`]: an attempt's context points at its task in
/// the superstep's shared list rather than copying its key and payload.
#[derive(Clone)]
pub(crate) struct TaskRef {
    source: Arc<dyn TaskSource>,
    index: usize,
}

impl TaskRef {
    pub(crate) fn new(source: Arc<dyn TaskSource>, index: usize) -> Self {
        TaskRef { source, index }
    }

    fn task(&self) -> Option<&MusterTask> {
        self.source.task(self.index)
    }
}

impl fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.task(), f)
    }
}

/// Who served a Paladin attempt's answer, as its port reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Served {
    pub(crate) served_by: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) chain_position: Option<u32>,
    pub(crate) fallback: bool,
}

/// An attempt's [`Served`] report, shared with the engine (which reads it
/// after the attempt, even when the attempt ran as a task of its own).
///
/// Only a Paladin attempt reports who served it, so only a Paladin node's
/// slot holds anything: the default slot (every other node's) allocates
/// nothing and ignores what is set.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServedSlot(Option<Arc<std::sync::Mutex<Option<Served>>>>);

impl ServedSlot {
    /// A slot that keeps its report: a Paladin node's.
    pub(crate) fn recording() -> Self {
        ServedSlot(Some(Arc::default()))
    }

    /// Records `served` (the attempt's last word wins); a no-op on a slot
    /// that does not record.
    pub(crate) fn set(&self, served: Served) {
        if let Some(slot) = &self.0 {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(served);
        }
    }

    /// A copy of the report, leaving it in place (for the attempt's span).
    pub(crate) fn peek(&self) -> Option<Served> {
        let slot = self.0.as_ref()?;
        slot.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes the report, leaving none.
    pub(crate) fn take(&self) -> Option<Served> {
        let slot = self.0.as_ref()?;
        slot.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl NodeContext {
    /// A context for calling a node outside an engine (unit tests of nodes).
    pub fn detached(node_id: impl Into<NodeId>) -> Self {
        NodeContext {
            node_id: node_id.into(),
            thread_id: Arc::from("detached"),
            superstep: 1,
            attempt: 1,
            heartbeat: HeartbeatHandle::noop(),
            shared: AttemptShared::new(CancellationToken::new(), None),
            parley_response: None,
            task: None,
            served: ServedSlot::default(),
            emitter: NodeEmitter::default(),
            meter: super::SpendMeter::default(),
        }
    }

    /// This context recording its effects ([`NodeContext::effect`]) in
    /// `ledger`: for calling a node with effects outside an engine (a
    /// detached context has no ledger, and its effects fail with
    /// [`EffectError::NoLedger`](super::EffectError::NoLedger)).
    #[must_use]
    pub fn with_effect_ledger(mut self, ledger: Arc<dyn EffectLedger>) -> Self {
        let scope = Some(Arc::new(EffectScope::new(ledger)));
        self.shared = AttemptShared::new(self.shared.cancellation.clone(), scope);
        self
    }

    /// The running node.
    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    /// The run's thread.
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The superstep, 1-based.
    pub fn superstep(&self) -> u32 {
        self.superstep
    }

    /// The attempt, 1-based.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Reports progress: restarts the idle window (a no-op without one).
    pub fn heartbeat(&self) {
        self.heartbeat.beat();
    }

    /// The attempt's heartbeat, to hand to code that reports progress.
    pub fn heartbeat_handle(&self) -> &HeartbeatHandle {
        &self.heartbeat
    }

    /// Cancelled when the engine shuts down; long work may watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.shared.cancellation
    }

    /// The human's answer, on the re-run after a parley.
    pub fn parley_response(&self) -> Option<&ParleyResponse> {
        self.parley_response.as_ref()
    }

    /// The task, when this node runs as a mustered task of a worker template.
    pub fn task(&self) -> Option<&MusterTask> {
        self.task.as_ref().and_then(TaskRef::task)
    }

    /// Sends a progress payload of the node's own to the run's stream (a
    /// [`StreamEvent::Custom`](crate::engine::StreamEvent::Custom), for consumers of
    /// [`StreamMode::Custom`](crate::engine::StreamMode::Custom)), and beats the
    /// heartbeat: progress reported to the caller is progress. Without a
    /// stream consumer only the beat happens.
    pub fn emit(&self, payload: impl Into<serde_json::Value>) {
        self.heartbeat.beat();
        if self.emitter.is_active() {
            self.emitter.custom(payload.into());
        }
    }

    /// Sends a text delta of an LLM answer to the run's stream (a
    /// [`StreamEvent::Token`](crate::engine::StreamEvent::Token) tagged with this
    /// attempt and `provider`). The Paladin service calls this for every
    /// streamed chunk; a custom [`PaladinPort`](crate::paladin::PaladinPort) may too.
    /// It does not beat the heartbeat (the caller reports its own progress).
    /// If the attempt is later abandoned (a failure, a timeout, a shutdown),
    /// the stream says so with a
    /// [`StreamEvent::AttemptAbandoned`](crate::engine::StreamEvent::AttemptAbandoned).
    pub fn emit_token(&self, provider: &str, text: &str) {
        self.emitter.token(provider, text);
    }

    /// Whether a stream consumer receives what [`NodeContext::emit`] and
    /// [`NodeContext::emit_token`] send: code may skip building payloads
    /// nobody reads.
    pub fn is_streaming(&self) -> bool {
        self.emitter.is_active()
    }
}
