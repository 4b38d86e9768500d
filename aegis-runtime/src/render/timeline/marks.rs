//! The marks a timeline shows, as typed facts: drawing turns them into
//! words, so no mark's meaning hangs on a message's wording.

use std::fmt;

use super::facts::Hop;
use crate::error::{NodeError, NodeErrorSource, TimeoutKind, Transience};
use crate::graph::EffectNote;
use crate::id::NodeId;
use crate::policy::{Skip, Spend};
use crate::waypoint::HandlerKind;

/// How an attempt ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Succeeded,
    Transient,
    Permanent,
    Unknown,
    /// Cut by the bound it names.
    Timeout(TimeoutKind),
    Skipped,
}

impl Outcome {
    /// How a failed attempt ended: a timeout by its bound, anything else by
    /// its transience.
    pub(super) fn of(error: &NodeError) -> Self {
        if let NodeErrorSource::Timeout(bound) = error.source {
            return Outcome::Timeout(bound);
        }
        match error.transience {
            Transience::Transient => Outcome::Transient,
            Transience::Permanent => Outcome::Permanent,
            Transience::Unknown => Outcome::Unknown,
        }
    }

    /// The CSS class, also what a test reads.
    pub(super) fn class(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed-transient",
            Outcome::Permanent => "failed-permanent",
            Outcome::Unknown => "failed-unknown",
            Outcome::Timeout(_) => "timeout",
            Outcome::Skipped => "skipped",
        }
    }

    /// How a hover says it.
    pub(super) fn words(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed (transient)",
            Outcome::Permanent => "failed (permanent)",
            Outcome::Unknown => "failed (unknown)",
            Outcome::Timeout(_) => "timed out",
            Outcome::Skipped => "skipped",
        }
    }
}

/// What an attempt's hover says beside its outcome, on one line in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Note {
    /// The error that failed it.
    Error(NodeErrorSource),
    /// Why it did not finish (`shutdown`, `interceptor`).
    SkipReason(String),
    /// What it spent.
    Spent(Spend),
    /// A retry or fallback hop the activation did not send, and why.
    NotSent(Skip),
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Error(source) => source.fmt(f),
            Note::SkipReason(reason) => f.write_str(reason),
            Note::Spent(spend) => write!(f, "spent {spend}"),
            Note::NotSent(skip) => skip.fmt(f),
        }
    }
}

/// One attempt's bar.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    /// Which attempt, 1-based.
    pub(super) attempt: u32,
    pub(super) outcome: Outcome,
    /// The error, the skip reason, what it spent, what was not sent.
    pub(super) notes: Vec<Note>,
    /// What became of each of its effects.
    pub(super) effects: Vec<EffectNote>,
    /// Fallback hops reported during this attempt.
    pub(super) hops: Vec<Hop>,
    /// The bar includes an unknown backoff before the attempt.
    pub(super) includes_wait: bool,
}

/// Something drawn on a lane.
#[derive(Debug, Clone)]
pub(super) enum Mark {
    Attempt(Attempt),
    /// The wait before a retry.
    Backoff {
        before_attempt: u32,
    },
    /// A result served from the node cache.
    CacheHit,
    /// A final failure its `on_error` handler compensated.
    Handled {
        handler: HandlerKind,
    },
    /// A question to a human, from when it was asked to its answer.
    Parley {
        prompt: String,
        answered: bool,
    },
}

/// A mark and when it lasted, in ms since the run began.
#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) mark: Mark,
}

/// One node's row, or one mustered task's.
#[derive(Debug)]
pub(super) struct Lane {
    pub(super) node: NodeId,
    /// The task key, for a mustered task's lane.
    pub(super) task: Option<String>,
    pub(super) marks: Vec<Placed>,
}

impl Lane {
    /// `node`, or `node[task]`.
    pub(super) fn name(&self) -> String {
        match &self.task {
            Some(t) => format!("{}[{t}]", self.node),
            None => self.node.to_string(),
        }
    }
}

/// A line across every lane.
#[derive(Debug)]
pub(super) struct Rule {
    pub(super) at: f64,
    pub(super) kind: RuleKind,
}

/// Why a rule is drawn.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RuleKind {
    /// The superstep numbered ended.
    Barrier(u32),
    /// The run halted, for the reason given.
    Halted(String),
    /// The run failed, with the error given.
    Failed(String),
}
