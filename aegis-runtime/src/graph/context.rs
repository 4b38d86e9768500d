//! What a node sees of the engine while it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{MusterTask, NodeEmitter, ParleyResponse};
use crate::deadline::deadline_after;
use crate::id::NodeId;

/// Reports an attempt's progress to its idle timeout.
///
/// Each [`HeartbeatHandle::beat`] restarts the idle window. A handle of an
/// attempt without an idle timeout is a no-op, so nodes may beat
/// unconditionally. Clones share one heartbeat.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatHandle(Option<Arc<Beat>>);

#[derive(Debug)]
struct Beat {
    origin: Instant,
    last_nanos: AtomicU64,
    count: AtomicU64,
}

impl HeartbeatHandle {
    /// A handle that records nothing.
    pub fn noop() -> Self {
        HeartbeatHandle(None)
    }

    /// A handle that records beats, its window starting now.
    pub fn tracking() -> Self {
        HeartbeatHandle(Some(Arc::new(Beat {
            origin: Instant::now(),
            last_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        })))
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
    /// tracked, or when the window is too long for an `Instant` to hold.
    pub(crate) fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        self.last_beat().and_then(|last| deadline_after(last, idle))
    }

    /// Resolves once no beat has arrived for `idle` (never, for a window
    /// too long for an `Instant`).
    pub(crate) async fn idle_for(&self, idle: Duration) {
        loop {
            let Some(deadline) = self.idle_deadline(idle) else {
                return std::future::pending().await;
            };
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
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
    pub(crate) cancellation: CancellationToken,
    pub(crate) parley_response: Option<ParleyResponse>,
    pub(crate) task: Option<MusterTask>,
    /// Where [`NodeContext::emit`] and [`NodeContext::emit_token`] send.
    pub(crate) emitter: NodeEmitter,
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
            cancellation: CancellationToken::new(),
            parley_response: None,
            task: None,
            emitter: NodeEmitter::default(),
        }
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
        &self.cancellation
    }

    /// The human's answer, on the re-run after a parley.
    pub fn parley_response(&self) -> Option<&ParleyResponse> {
        self.parley_response.as_ref()
    }

    /// The task, when this node runs as a mustered task of a worker template.
    pub fn task(&self) -> Option<&MusterTask> {
        self.task.as_ref()
    }

    /// Sends a progress payload of the node's own to the run's stream (a
    /// [`StreamEvent::Custom`](crate::StreamEvent::Custom), for consumers of
    /// [`StreamMode::Custom`](crate::StreamMode::Custom)), and beats the
    /// heartbeat: progress reported to the caller is progress. Without a
    /// stream consumer only the beat happens.
    pub fn emit(&self, payload: impl Into<serde_json::Value>) {
        self.heartbeat.beat();
        if self.emitter.is_active() {
            self.emitter.custom(payload.into());
        }
    }

    /// Sends a text delta of an LLM answer to the run's stream (a
    /// [`StreamEvent::Token`](crate::StreamEvent::Token) tagged with this
    /// attempt and `provider`). The Paladin service calls this for every
    /// streamed chunk; a custom [`PaladinPort`](crate::PaladinPort) may too.
    /// It does not beat the heartbeat (the caller reports its own progress).
    /// If the attempt is later abandoned (a failure, a timeout, a shutdown),
    /// the stream says so with a
    /// [`StreamEvent::AttemptAbandoned`](crate::StreamEvent::AttemptAbandoned).
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
