//! What a stream carries and how it is configured.

use crate::engine::outcome::RunOutcome;
use crate::error::EngineError;
use crate::id::NodeId;
use crate::state::{Battlefield, StateDelta};
use crate::trace::{AttemptStatus, TraceEvent};

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

/// Which events a [`RunStream`](crate::engine::RunStream) carries and how many it holds unread.
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
