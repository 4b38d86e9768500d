//! The bounded queue the engine pushes a stream's events into, and each
//! attempt's tap into it: pushing never waits for the consumer.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use super::events::{StreamEvent, StreamMode, StreamOptions};
use crate::graph::{EmitTarget, NodeEmitter};
use crate::id::NodeId;
use crate::trace::AttemptStatus;

/// The queue the engine pushes into and the stream pops from.
pub(crate) struct StreamTap {
    pub(super) options: StreamOptions,
    queue: Mutex<Queue>,
}

pub(super) struct Queue {
    pub(super) events: VecDeque<StreamEvent>,
    /// Dropped since the last `Lagged` was queued.
    pub(super) dropped: u64,
    pub(super) waker: Option<Waker>,
}

impl fmt::Debug for StreamTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamTap")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl StreamTap {
    pub(super) fn new(options: StreamOptions) -> Arc<Self> {
        Arc::new(StreamTap {
            options,
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                dropped: 0,
                waker: None,
            }),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
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
        let capacity = self.options.capacity();
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
