//! Streaming a run to its caller: [`WarEngine::stream`] runs the thread on a
//! task of its own and hands back a [`RunStream`] of [`StreamEvent`]s that
//! ends with the run's outcome.
//!
//! The engine pushes into a bounded queue and never waits for the consumer:
//! when the queue is full, events are dropped and counted, and the consumer
//! later reads one [`StreamEvent::Lagged`] where they would have been. Two
//! events are never dropped, whatever the backlog: the final
//! [`StreamEvent::Finished`], and [`StreamEvent::AttemptAbandoned`], which
//! tells the consumer to discard tokens it already holds.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use super::barrier::Finished;
use super::run::Cursor;
use super::{RunOutcome, WarEngine};
use crate::error::EngineError;
use crate::graph::{
    EmitTarget, MusterTask, NextStep, NodeEmitter, ParleyRequest, ParleyResponse, WarGraph,
};
use crate::id::NodeId;
use crate::state::{Battlefield, StateDelta};
use crate::trace::{AttemptStatus, TraceEvent};
use crate::waypoint::WaypointStore;

/// What a stream carries; several modes may be selected at once (see
/// [`StreamOptions`]). [`StreamEvent::Lagged`] and [`StreamEvent::Finished`]
/// come whatever the modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamMode {
    /// [`StreamEvent::Updates`]: each superstep's writes, as merged.
    Updates,
    /// [`StreamEvent::Values`]: the whole state after each superstep.
    Values,
    /// [`StreamEvent::Token`] and [`StreamEvent::AttemptAbandoned`]: LLM
    /// text as Paladin nodes receive it, and which attempts to discard.
    Tokens,
    /// [`StreamEvent::Trace`]: every [`TraceEvent`] of the run (supersteps,
    /// attempts, retries, handlers, parleys, the run's end).
    Events,
    /// [`StreamEvent::Custom`]: payloads nodes send with
    /// [`NodeContext::emit`](crate::graph::NodeContext::emit).
    Custom,
}

impl StreamMode {
    /// Every mode.
    pub const ALL: [StreamMode; 5] = [
        StreamMode::Updates,
        StreamMode::Values,
        StreamMode::Tokens,
        StreamMode::Events,
        StreamMode::Custom,
    ];

    fn bit(self) -> u8 {
        match self {
            StreamMode::Updates => 1,
            StreamMode::Values => 2,
            StreamMode::Tokens => 4,
            StreamMode::Events => 8,
            StreamMode::Custom => 16,
        }
    }
}

/// The default bound of a stream's queue.
pub const DEFAULT_STREAM_CAPACITY: usize = 1024;

/// Which events a [`RunStream`] carries and how many it holds unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    modes: u8,
    capacity: usize,
}

impl Default for StreamOptions {
    /// Every mode, [`DEFAULT_STREAM_CAPACITY`] events.
    fn default() -> Self {
        StreamOptions::new(StreamMode::ALL)
    }
}

impl StreamOptions {
    /// These modes, [`DEFAULT_STREAM_CAPACITY`] events.
    pub fn new(modes: impl IntoIterator<Item = StreamMode>) -> Self {
        StreamOptions {
            modes: modes.into_iter().fold(0, |bits, m| bits | m.bit()),
            capacity: DEFAULT_STREAM_CAPACITY,
        }
    }

    /// Holds at most `capacity` unread events (at least 1); beyond it events
    /// are dropped and counted in a [`StreamEvent::Lagged`].
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Whether `mode` is selected.
    pub fn has(&self, mode: StreamMode) -> bool {
        self.modes & mode.bit() != 0
    }

    /// The queue's bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// One node's writes in a superstep's [`StreamEvent::Updates`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NodeUpdate {
    /// The writing node.
    pub node_id: NodeId,
    /// Its task key, for a mustered task.
    pub task_key: Option<String>,
    /// What it wrote (its error handler's delta, after a handled failure).
    pub delta: StateDelta,
}

/// Something that happened in a streamed run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A trace event ([`StreamMode::Events`]).
    Trace(TraceEvent),
    /// A superstep merged these writes, in vanguard order (the merge's
    /// order), before its waypoint was written ([`StreamMode::Updates`]).
    Updates {
        /// The thread (a Battalion child's supersteps carry the child thread).
        thread_id: String,
        /// The superstep.
        superstep: u32,
        /// Each activation's writes; a parleying activation wrote nothing.
        writes: Vec<NodeUpdate>,
    },
    /// The state after a superstep merged ([`StreamMode::Values`]).
    Values {
        /// The thread.
        thread_id: String,
        /// The superstep.
        superstep: u32,
        /// The merged state.
        state: Battlefield,
    },
    /// A text delta a Paladin node received ([`StreamMode::Tokens`]): each
    /// streamed chunk's text (a whole completion is one token when the
    /// service does not stream), in every completion round of the attempt
    /// (a round that asks for tools rarely carries text).
    ///
    /// A consumer that drops the tokens of every attempt named by a later
    /// [`StreamEvent::AttemptAbandoned`] shows exactly the answers merged:
    /// the abandonment always comes before any token of the node's next
    /// attempt. A fallback hop before the first chunk streams nothing from
    /// the failed provider.
    Token {
        /// The thread.
        thread_id: String,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt, 1-based.
        attempt: u32,
        /// The provider serving the completion (the one a fallback chain
        /// stamped, else the adapter's name).
        provider: String,
        /// The text.
        text: String,
    },
    /// An attempt that streamed tokens will never be merged: it failed, timed
    /// out or was shut down ([`StreamMode::Tokens`]). Drop its tokens.
    AttemptAbandoned {
        /// The thread.
        thread_id: String,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The abandoned attempt.
        attempt: u32,
        /// How it ended: `Failed` (a timeout too) or `Skipped` (shutdown).
        reason: AttemptStatus,
    },
    /// A node's own payload, from
    /// [`NodeContext::emit`](crate::graph::NodeContext::emit) ([`StreamMode::Custom`]).
    Custom {
        /// The thread.
        thread_id: String,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt, 1-based.
        attempt: u32,
        /// The payload.
        payload: serde_json::Value,
    },
    /// The consumer fell behind: `dropped` events were discarded here
    /// (never the final one, nor an [`StreamEvent::AttemptAbandoned`]).
    Lagged {
        /// How many.
        dropped: u64,
    },
    /// The run's end, always the last event: what `start` or `resume`
    /// would have returned.
    Finished(Result<RunOutcome, EngineError>),
}

/// The queue the engine pushes into and the stream pops from.
pub(crate) struct StreamTap {
    options: StreamOptions,
    queue: Mutex<Queue>,
}

struct Queue {
    events: VecDeque<StreamEvent>,
    /// Dropped since the last `Lagged` was queued.
    dropped: u64,
    waker: Option<Waker>,
}

impl fmt::Debug for StreamTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamTap")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl StreamTap {
    fn new(options: StreamOptions) -> Arc<Self> {
        Arc::new(StreamTap {
            options,
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                dropped: 0,
                waker: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A consumer or engine that panicked holding the lock left a valid
        // queue: every update is a single push, pop or counter change.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `mode` is streamed at all.
    pub(crate) fn wants(&self, mode: StreamMode) -> bool {
        self.options.has(mode)
    }

    /// Queues the event `make` builds, if `mode` is selected; when the queue
    /// is full the event is counted instead (and never built). Never waits.
    pub(crate) fn push_with(&self, mode: StreamMode, make: impl FnOnce() -> StreamEvent) {
        if !self.wants(mode) {
            return;
        }
        let mut q = self.lock();
        let capacity = self.options.capacity;
        if q.events.len() >= capacity {
            q.dropped = q.dropped.saturating_add(1);
            return;
        }
        if q.dropped > 0 {
            let dropped = std::mem::take(&mut q.dropped);
            q.events.push_back(StreamEvent::Lagged { dropped });
            if q.events.len() >= capacity {
                q.dropped = 1;
                return;
            }
        }
        q.events.push_back(make());
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    }

    /// Queues the event `make` builds, if `mode` is selected, whatever the
    /// backlog: a marker the consumer must see (an abandoned attempt, whose
    /// tokens it would otherwise keep). What was dropped before it is
    /// reported first, so it reads in order; the queue may pass its
    /// capacity by the markers, one per ended attempt at most.
    pub(crate) fn push_kept(&self, mode: StreamMode, make: impl FnOnce() -> StreamEvent) {
        if !self.wants(mode) {
            return;
        }
        let mut q = self.lock();
        if q.dropped > 0 {
            let dropped = std::mem::take(&mut q.dropped);
            q.events.push_back(StreamEvent::Lagged { dropped });
        }
        q.events.push_back(make());
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    }

    /// An emitter for one attempt, or an inactive one when neither tokens
    /// nor custom events are streamed.
    pub(crate) fn attempt(
        self: &Arc<Self>,
        thread_id: &Arc<str>,
        node_id: &NodeId,
        task_key: Option<&str>,
        attempt: u32,
    ) -> Option<Arc<AttemptTap>> {
        if !self.wants(StreamMode::Tokens) && !self.wants(StreamMode::Custom) {
            return None;
        }
        Some(Arc::new(AttemptTap {
            tap: self.clone(),
            thread_id: thread_id.clone(),
            node_id: node_id.clone(),
            task_key: task_key.map(str::to_string),
            attempt,
            state: Mutex::new(AttemptState::default()),
        }))
    }
}

/// One attempt's tokens and custom payloads, tagged with the attempt.
pub(crate) struct AttemptTap {
    tap: Arc<StreamTap>,
    thread_id: Arc<str>,
    node_id: NodeId,
    task_key: Option<String>,
    attempt: u32,
    state: Mutex<AttemptState>,
}

#[derive(Default)]
struct AttemptState {
    /// The attempt ended: nothing more of it is streamed (an aborted task
    /// may still be running for a moment).
    closed: bool,
    tokens: u64,
}

impl AttemptTap {
    fn state(&self) -> MutexGuard<'_, AttemptState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attempt's end. Tokens after this are dropped; when it was not
    /// merged (`abandoned` is the reason) and streamed tokens, the stream
    /// says so before anything of a later attempt.
    pub(crate) fn close(&self, abandoned: Option<AttemptStatus>) {
        let mut state = self.state();
        state.closed = true;
        if let Some(reason) = abandoned
            && state.tokens > 0
        {
            self.tap
                .push_kept(StreamMode::Tokens, || StreamEvent::AttemptAbandoned {
                    thread_id: self.thread_id.to_string(),
                    node_id: self.node_id.clone(),
                    task_key: self.task_key.clone(),
                    attempt: self.attempt,
                    reason,
                });
        }
    }
}

impl EmitTarget for AttemptTap {
    fn token(&self, provider: &str, text: &str) {
        if text.is_empty() {
            return;
        }
        // Held while pushing, so `close` orders its abandonment after every
        // token it counted.
        let mut state = self.state();
        if state.closed {
            return;
        }
        // Counted even when the queue drops it: the consumer may have seen
        // earlier tokens of this attempt.
        state.tokens = state.tokens.saturating_add(1);
        self.tap
            .push_with(StreamMode::Tokens, || StreamEvent::Token {
                thread_id: self.thread_id.to_string(),
                node_id: self.node_id.clone(),
                task_key: self.task_key.clone(),
                attempt: self.attempt,
                provider: provider.to_string(),
                text: text.to_string(),
            });
    }

    fn custom(&self, payload: serde_json::Value) {
        if self.state().closed {
            return;
        }
        self.tap
            .push_with(StreamMode::Custom, || StreamEvent::Custom {
                thread_id: self.thread_id.to_string(),
                node_id: self.node_id.clone(),
                task_key: self.task_key.clone(),
                attempt: self.attempt,
                payload,
            });
    }
}

/// An attempt's emitter for its `NodeContext`.
pub(crate) fn emitter(tap: Option<&Arc<AttemptTap>>) -> NodeEmitter {
    match tap {
        Some(t) => NodeEmitter::new(t.clone()),
        None => NodeEmitter::default(),
    }
}

/// A run in progress, as a [`Stream`] of [`StreamEvent`]s ending with
/// [`StreamEvent::Finished`].
///
/// The run executes on a tokio task of its own, so a slow consumer slows
/// nothing but its stream (see [`StreamOptions::with_capacity`]). Dropping
/// the stream before the end shuts the run down as the engine's
/// cancellation token would: running attempts get their shutdown grace and
/// the thread halts with a resumable `Halted` waypoint.
pub struct RunStream {
    thread_id: String,
    tap: Arc<StreamTap>,
    run: Option<JoinHandle<Result<RunOutcome, EngineError>>>,
    outcome: Option<Result<RunOutcome, EngineError>>,
    /// Cancels the run's token when the stream is dropped.
    _halt_on_drop: DropGuard,
    finished: bool,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("options", &self.tap.options)
            .field("running", &self.run.is_some())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl RunStream {
    fn new(
        thread_id: &str,
        tap: Arc<StreamTap>,
        run: JoinHandle<Result<RunOutcome, EngineError>>,
        halt: DropGuard,
    ) -> Self {
        RunStream {
            thread_id: thread_id.to_string(),
            tap,
            run: Some(run),
            outcome: None,
            _halt_on_drop: halt,
            finished: false,
        }
    }

    /// Waits for the run's end without reading its events (they are
    /// dropped, and the queue stays bounded): what `start` or `resume` would
    /// have returned. After the stream has yielded its
    /// [`StreamEvent::Finished`] the outcome is gone, and this returns
    /// [`EngineError::Halted`], as it does when the runtime shut down under
    /// the run.
    pub async fn outcome(mut self) -> Result<RunOutcome, EngineError> {
        if let Some(outcome) = self.outcome.take() {
            return outcome;
        }
        if let Some(run) = self.run.take() {
            match run.await {
                Ok(outcome) => return outcome,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        Err(EngineError::Halted {
            thread_id: std::mem::take(&mut self.thread_id),
            vanguard: Vec::new(),
        })
    }
}

impl Stream for RunStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(run) = &mut this.run
            && let Poll::Ready(joined) = Pin::new(run).poll(cx)
        {
            this.run = None;
            match joined {
                Ok(outcome) => this.outcome = Some(outcome),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime is shutting down: no outcome will come.
                Err(_) => {}
            }
        }
        let mut q = this.tap.lock();
        if let Some(event) = q.events.pop_front() {
            return Poll::Ready(Some(event));
        }
        if this.run.is_some() {
            q.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if q.dropped > 0 {
            let dropped = std::mem::take(&mut q.dropped);
            return Poll::Ready(Some(StreamEvent::Lagged { dropped }));
        }
        drop(q);
        this.finished = true;
        Poll::Ready(this.outcome.take().map(StreamEvent::Finished))
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// [`WarEngine::start`] as a stream of every [`StreamMode`]: see
    /// [`WarEngine::stream_with`].
    pub fn stream(&self, graph: &WarGraph, thread_id: &str, input: serde_json::Value) -> RunStream {
        self.stream_with(graph, thread_id, input, StreamOptions::default())
    }

    /// [`WarEngine::start`] on a task of its own, returning its events as
    /// they happen and its outcome as the last one
    /// ([`StreamEvent::Finished`]; an error `start` would return comes
    /// there too).
    ///
    /// Must be called within a tokio runtime. The graph is cloned (its nodes
    /// are shared, not copied). Events beyond `options`' capacity are
    /// dropped and counted, never waited for. Dropping the stream halts the
    /// run (see [`RunStream`]).
    pub fn stream_with(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        input: serde_json::Value,
        options: StreamOptions,
    ) -> RunStream {
        let (engine, tap) = self.streaming(options);
        let halt = tokio_util::sync::CancellationToken::clone(&engine.cancellation).drop_guard();
        let (graph, id) = (graph.clone(), thread_id.to_string());
        let run = tokio::spawn(async move { engine.start(&graph, &id, input).await });
        RunStream::new(thread_id, tap, run, halt)
    }

    /// [`WarEngine::resume`] as a stream of every [`StreamMode`].
    pub fn stream_resume(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
    ) -> RunStream {
        self.stream_resume_with(graph, thread_id, response, StreamOptions::default())
    }

    /// [`WarEngine::resume`] as a stream: see [`WarEngine::stream_with`].
    pub fn stream_resume_with(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
        options: StreamOptions,
    ) -> RunStream {
        let (engine, tap) = self.streaming(options);
        let halt = tokio_util::sync::CancellationToken::clone(&engine.cancellation).drop_guard();
        let (graph, id) = (graph.clone(), thread_id.to_string());
        let run = tokio::spawn(async move { engine.resume(&graph, &id, response).await });
        RunStream::new(thread_id, tap, run, halt)
    }

    /// A superstep merged (its state is `cur.state`, its completed
    /// activations still listed): the parleys it raised, and for a stream
    /// its writes and the merged state.
    pub(crate) fn superstep_merged(
        &self,
        cur: &Cursor,
        finished: &[Finished<'_>],
        requests: &[(NodeId, ParleyRequest)],
    ) {
        for (node_id, request) in requests {
            self.emit(TraceEvent::ParleyRaised {
                thread_id: cur.thread_id.to_string(),
                superstep: cur.superstep,
                node_id: node_id.clone(),
                prompt: request.prompt.clone(),
            });
        }
        let Some(tap) = &self.stream else {
            return;
        };
        tap.push_with(StreamMode::Updates, || StreamEvent::Updates {
            thread_id: cur.thread_id.to_string(),
            superstep: cur.superstep,
            writes: finished
                .iter()
                .filter(|f| !matches!(f.directive.next, NextStep::Parley(_)))
                .map(|f| NodeUpdate {
                    node_id: f.activation.node_id.clone(),
                    task_key: f.activation.task_key().map(str::to_string),
                    delta: f.directive.delta.clone(),
                })
                .collect(),
        });
        tap.push_with(StreamMode::Values, || StreamEvent::Values {
            thread_id: cur.thread_id.to_string(),
            superstep: cur.superstep,
            state: cur.state.clone(),
        });
    }

    /// The stream emitter of one attempt, when a stream wants tokens or
    /// custom events.
    pub(crate) fn attempt_tap(
        &self,
        thread_id: &Arc<str>,
        node_id: &NodeId,
        task: Option<&MusterTask>,
        attempt: u32,
    ) -> Option<Arc<AttemptTap>> {
        let task_key = task.map(|t| t.task_key.as_str());
        self.stream
            .as_ref()?
            .attempt(thread_id, node_id, task_key, attempt)
    }

    /// This engine with a stream attached and a child cancellation token
    /// (cancelled when the stream is dropped).
    fn streaming(&self, options: StreamOptions) -> (WarEngine<S>, Arc<StreamTap>) {
        let tap = StreamTap::new(options);
        let engine = WarEngine {
            stream: Some(tap.clone()),
            ..self.derived()
        };
        (engine, tap)
    }
}
