//! One activation's marks on its lane: its attempts, each after the
//! backoff before it, from its record and what the trace adds.

use std::time::{Duration, SystemTime};

use super::facts::{Hop, TraceFacts};
use super::marks::{Attempt, Mark, Note, Outcome, Placed};
use crate::graph::EffectNote;
use crate::policy::Spend;
use crate::waypoint::{NodeExecutionRecord, NodeStatus};

/// Milliseconds from `t0` to `t` (0 for a `t` before it).
pub(super) fn since(t0: SystemTime, t: SystemTime) -> f64 {
    t.duration_since(t0).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0
}

/// What became of each effect of `r`'s attempt `attempt`.
fn effects_of(r: &NodeExecutionRecord, attempt: u32) -> Vec<EffectNote> {
    r.effects()
        .iter()
        .filter(|e| e.attempt == attempt)
        .cloned()
        .collect()
}

/// One record's attempts, laid on its lane left to right.
pub(super) struct Activation<'a> {
    record: &'a NodeExecutionRecord,
    /// The superstep it ran in.
    superstep: u32,
    facts: &'a TraceFacts,
    /// When the run began.
    t0: SystemTime,
}

impl<'a> Activation<'a> {
    /// `record`, run in `superstep` of a run that began at `t0`.
    pub(super) fn new(
        record: &'a NodeExecutionRecord,
        superstep: u32,
        facts: &'a TraceFacts,
        t0: SystemTime,
    ) -> Self {
        Activation {
            record,
            superstep,
            facts,
            t0,
        }
    }

    pub(super) fn record(&self) -> &'a NodeExecutionRecord {
        self.record
    }

    /// Lays the activation's marks on its lane's `marks`: a cache hit's
    /// bar, or each attempt after the backoff before it. Returns where the
    /// last mark ends and how many attempts were drawn.
    pub(super) fn lay(&self, marks: &mut Vec<Placed>) -> (f64, usize) {
        let r = self.record;
        let start = self.at(r.started_at);
        let finish = start + r.duration_ms as f64;
        if r.cache_hit {
            marks.push(Placed {
                start,
                end: finish,
                mark: Mark::CacheHit,
            });
            return (finish, 0);
        }
        let cursor = self.failed_attempts(marks, start);
        match self.closing() {
            Some(closing) => {
                let end = self.closing_attempt(marks, cursor, finish.max(cursor), closing);
                (end, r.attempts.len() + 1)
            }
            None => {
                self.skips_on_last_failure(marks);
                (cursor, r.attempts.len())
            }
        }
    }

    /// Milliseconds since the run began.
    fn at(&self, t: SystemTime) -> f64 {
        since(self.t0, t)
    }

    /// The traced hops when the trace has the attempt's, else the record's
    /// (a timeline drawn from waypoints alone): never both, so a hop is
    /// drawn once.
    fn hops(&self, attempt: u32) -> Vec<Hop> {
        let r = self.record;
        match self
            .facts
            .hops_in(&r.node_id, &r.task_key, attempt, self.superstep)
        {
            Some(traced) => traced.clone(),
            None => r
                .hops()
                .iter()
                .filter(|h| h.attempt == attempt)
                .map(|h| Hop {
                    from: h.from_provider.clone(),
                    to: h.to_provider.clone(),
                })
                .collect(),
        }
    }

    /// The traced wait before `attempt`, in milliseconds.
    fn delay_before(&self, attempt: u32) -> Option<f64> {
        let r = self.record;
        self.facts
            .delay_before(&r.node_id, &r.task_key, attempt, self.superstep)
            .map(|d| d.as_secs_f64() * 1000.0)
    }

    /// The failed attempts from `start`, each after the backoff before it
    /// (the traced wait when there is one, exact on any clock, else the
    /// wall-clock gap); returns where the last one ended.
    fn failed_attempts(&self, marks: &mut Vec<Placed>, start: f64) -> f64 {
        let r = self.record;
        let mut cursor = start;
        for (i, a) in r.attempts.iter().enumerate() {
            let a_start = match self.delay_before(a.attempt) {
                Some(d) if i > 0 => cursor + d,
                _ => self.at(a.started_at).max(cursor),
            };
            if i > 0 {
                push_backoff(marks, cursor, a_start, a.attempt);
            }
            let a_end = a_start + a.duration_ms as f64;
            let notes = std::iter::once(Note::Error(a.error.source.clone()))
                .chain(a.spend.map(Note::Spent))
                .collect();
            marks.push(Placed {
                start: a_start,
                end: a_end,
                mark: Mark::Attempt(Attempt {
                    attempt: a.attempt,
                    outcome: Outcome::of(&a.error),
                    notes,
                    effects: effects_of(r, a.attempt),
                    hops: self.hops(a.attempt),
                    includes_wait: false,
                }),
            });
            cursor = a_end;
        }
        cursor
    }

    /// How the attempt after the listed ones ended, with its notes: `None`
    /// when there is none to draw (a final failure is the last listed).
    fn closing(&self) -> Option<(Outcome, Vec<Note>)> {
        let r = self.record;
        let (outcome, reason) = match &r.status {
            NodeStatus::Succeeded => (Outcome::Succeeded, None),
            NodeStatus::Skipped { reason } => (Outcome::Skipped, Some(reason.clone())),
            NodeStatus::Failed if r.attempts.last().map(|a| a.attempt) == Some(r.attempt) => {
                return None;
            }
            NodeStatus::Failed => (Outcome::Unknown, None),
        };
        // What the closing attempt spent and what the activation skipped
        // go on its bar.
        let notes = reason
            .map(Note::SkipReason)
            .into_iter()
            .chain(self.closing_spend().map(Note::Spent))
            .chain(r.skips().iter().cloned().map(Note::NotSent))
            .collect();
        Some((outcome, notes))
    }

    /// What the closing attempt spent: the activation's total less what the
    /// failed attempts spent.
    fn closing_spend(&self) -> Option<Spend> {
        let total = self.record.spend()?;
        let before = self
            .record
            .attempts
            .iter()
            .filter_map(|a| a.spend)
            .fold(Spend::default(), |s, a| s.plus(&a));
        let own = Spend::new(
            total.prompt_tokens.saturating_sub(before.prompt_tokens),
            total
                .completion_tokens
                .saturating_sub(before.completion_tokens),
            total.cost.saturating_sub(before.cost),
        )
        .with_estimated(total.estimated);
        Some(own)
    }

    /// The closing attempt's bar from `cursor` to `finish`, after the
    /// backoff before it. A waypoint does not record when that attempt
    /// started, so without the traced wait a retried one's bar includes it.
    fn closing_attempt(
        &self,
        marks: &mut Vec<Placed>,
        cursor: f64,
        finish: f64,
        (outcome, notes): (Outcome, Vec<Note>),
    ) -> f64 {
        let r = self.record;
        let retried = !r.attempts.is_empty();
        let (start, includes_wait) = match self.delay_before(r.attempt) {
            Some(d) if retried => ((cursor + d).min(finish), false),
            _ => (cursor, retried),
        };
        push_backoff(marks, cursor, start, r.attempt);
        marks.push(Placed {
            start,
            end: finish,
            mark: Mark::Attempt(Attempt {
                attempt: r.attempt,
                outcome,
                notes,
                effects: effects_of(r, r.attempt),
                hops: self.hops(r.attempt),
                includes_wait,
            }),
        });
        finish
    }

    /// A final failure's skipped retries and hops go on its last failed
    /// attempt's bar (no closing bar is drawn to hold them).
    fn skips_on_last_failure(&self, marks: &mut [Placed]) {
        let r = self.record;
        if r.skips().is_empty() {
            return;
        }
        if let Some(Placed {
            mark: Mark::Attempt(last),
            ..
        }) = marks.last_mut()
        {
            last.notes
                .extend(r.skips().iter().cloned().map(Note::NotSent));
        }
    }
}

/// The wait between two attempts, when there is one.
fn push_backoff(marks: &mut Vec<Placed>, from: f64, to: f64, before_attempt: u32) {
    if to > from {
        marks.push(Placed {
            start: from,
            end: to,
            mark: Mark::Backoff { before_attempt },
        });
    }
}
