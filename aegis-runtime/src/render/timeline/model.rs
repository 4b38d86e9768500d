//! The model: lanes of marks on one time axis, in milliseconds since the run
//! began, built from the waypoints and what the trace adds.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use super::facts::TraceFacts;
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::id::NodeId;
use crate::policy::Spend;
use crate::trace::TraceEvent;
use crate::waypoint::{HandledFailure, NodeExecutionRecord, NodeStatus, Waypoint, WaypointStatus};

/// How an attempt ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Succeeded,
    Transient,
    Permanent,
    Unknown,
    Timeout,
    Skipped,
}

impl Outcome {
    pub(super) fn of(error: &NodeError) -> Self {
        if matches!(error.source, NodeErrorSource::Timeout(_)) {
            return Outcome::Timeout;
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
            Outcome::Timeout => "timeout",
            Outcome::Skipped => "skipped",
        }
    }

    pub(super) fn words(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed (transient)",
            Outcome::Permanent => "failed (permanent)",
            Outcome::Unknown => "failed (unknown)",
            Outcome::Timeout => "timed out",
            Outcome::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Mark {
    Attempt {
        attempt: u32,
        outcome: Outcome,
        /// The error, the skip reason, or a note.
        detail: Option<String>,
        /// Fallback hops reported during this attempt: (from, to).
        hops: Vec<(String, String)>,
        /// The bar includes an unknown backoff before the attempt.
        includes_wait: bool,
    },
    Backoff {
        before_attempt: u32,
    },
    CacheHit,
    Handled {
        handler: String,
    },
    Parley {
        prompt: String,
        answered: bool,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) mark: Mark,
}

#[derive(Debug)]
pub(super) struct Lane {
    pub(super) node: NodeId,
    pub(super) task: Option<String>,
    pub(super) marks: Vec<Placed>,
}

impl Lane {
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
    pub(super) text: String,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum RuleKind {
    Superstep,
    Halted,
    Failed,
}

#[derive(Debug)]
pub(super) struct Model {
    pub(super) lanes: Vec<Lane>,
    pub(super) rules: Vec<Rule>,
    pub(super) end: f64,
    pub(super) status: String,
    pub(super) supersteps: u32,
    pub(super) attempts: usize,
    /// What the thread's model calls spent, when any was metered.
    pub(super) spend: Option<Spend>,
}

fn since(t0: SystemTime, t: SystemTime) -> f64 {
    t.duration_since(t0).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0
}

/// `detail` followed by what became of each effect of `r`'s attempt
/// `attempt` (`effect charge aegis-…: done`), one per line.
fn effects_of(r: &NodeExecutionRecord, attempt: u32, detail: Option<String>) -> Option<String> {
    let lines: Vec<String> = r
        .effects
        .iter()
        .filter(|e| e.attempt == attempt)
        .map(|e| format!("effect {} {}: {}", e.name, e.key, e.outcome.name()))
        .collect();
    if lines.is_empty() {
        return detail;
    }
    Some(
        detail
            .into_iter()
            .chain(lines)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// A record with the superstep it ran in.
type Ran<'w> = (u32, &'w NodeExecutionRecord);

impl Model {
    pub(super) fn build(waypoints: &[Waypoint], trace: &[TraceEvent]) -> Self {
        let thread = waypoints
            .first()
            .map(|w| w.thread_id.as_str())
            .unwrap_or("");
        let facts = TraceFacts::read(thread, trace);
        let records = records_once(waypoints);
        let t0 = records
            .iter()
            .map(|(_, r)| r.started_at)
            .chain(waypoints.first().map(|w| w.created_at))
            .min()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut model = Model {
            lanes: Vec::new(),
            rules: Vec::new(),
            end: 0.0,
            status: waypoints
                .last()
                .map(|w| w.status.name().to_string())
                .unwrap_or_else(|| "no waypoints".to_string()),
            supersteps: waypoints.iter().map(|w| w.superstep).max().unwrap_or(0),
            attempts: 0,
            spend: records
                .iter()
                .filter_map(|(_, r)| r.spend)
                .reduce(|a, b| a.plus(&b)),
        };
        for &(superstep, record) in &records {
            model.add_activation(&Activation {
                record,
                superstep,
                facts: &facts,
                t0,
            });
        }
        model.order_lanes(waypoints);
        model.add_handled(waypoints, &records, t0);
        model.add_rules(waypoints, t0);
        model.add_parleys(waypoints, t0);
        model
    }

    /// One activation's marks on its lane: a cache hit's bar, or its
    /// attempts with the backoffs between them.
    fn add_activation(&mut self, a: &Activation<'_>) {
        let r = a.record;
        let lane = lane_of(&r.node_id, &r.task_key, &mut self.lanes);
        let marks = &mut self.lanes[lane].marks;
        let start = a.at(r.started_at);
        let finish = start + r.duration_ms as f64;
        if r.cache_hit {
            marks.push(Placed {
                start,
                end: finish,
                mark: Mark::CacheHit,
            });
            self.end = self.end.max(finish);
            return;
        }
        let mut cursor = a.failed_attempts(marks, start);
        self.attempts += r.attempts.len();
        match a.closing() {
            Some(closing) => {
                cursor = a.closing_attempt(marks, cursor, finish.max(cursor), closing);
                self.attempts += 1;
            }
            None => a.skips_on_last_failure(marks),
        }
        self.end = self.end.max(cursor);
    }

    /// A muster's lanes in task order, right after its node's first lane.
    fn order_lanes(&mut self, waypoints: &[Waypoint]) {
        let mut task_index: HashMap<(NodeId, String), u32> = HashMap::new();
        for w in waypoints {
            for a in w.vanguard.iter() {
                if let Some(task) = &a.task {
                    task_index.insert((a.node_id.clone(), task.task_key.clone()), task.index);
                }
            }
        }
        let first_of: HashMap<NodeId, usize> = self
            .lanes
            .iter()
            .enumerate()
            .rev()
            .map(|(i, l)| (l.node.clone(), i))
            .collect();
        self.lanes.sort_by_key(|l| {
            let index = l.task.as_ref().map(|t| {
                task_index
                    .get(&(l.node.clone(), t.clone()))
                    .copied()
                    .unwrap_or(u32::MAX)
            });
            (first_of.get(&l.node).copied().unwrap_or(usize::MAX), index)
        });
    }

    /// Handled failures: a note after the failed activation's last bar.
    fn add_handled(&mut self, waypoints: &[Waypoint], records: &[Ran<'_>], t0: SystemTime) {
        let mut seen = HashSet::new();
        for h in waypoints.iter().flat_map(|w| w.handled.iter()) {
            if !seen.insert((h.node_id.clone(), h.task_key.clone(), h.superstep)) {
                continue;
            }
            let Some(lane) = self
                .lanes
                .iter_mut()
                .find(|l| l.node == h.node_id && l.task == h.task_key)
            else {
                continue;
            };
            let Some(at) = records
                .iter()
                .filter(|(step, r)| {
                    *step == h.superstep && r.node_id == h.node_id && r.task_key == h.task_key
                })
                .map(|(_, r)| since(t0, r.started_at) + r.duration_ms as f64)
                .reduce(f64::max)
            else {
                continue;
            };
            lane.marks.push(Placed {
                start: at,
                end: at,
                mark: Mark::Handled {
                    handler: handler_words(h),
                },
            });
        }
    }

    /// A line across the lanes where each superstep ended, and where the run
    /// halted or failed.
    fn add_rules(&mut self, waypoints: &[Waypoint], t0: SystemTime) {
        for w in waypoints {
            let at = since(t0, w.created_at);
            self.end = self.end.max(at);
            let (kind, text) = match &w.status {
                WaypointStatus::Halted { reason } => {
                    (RuleKind::Halted, format!("halted: {reason}"))
                }
                WaypointStatus::Failed { error, .. } => {
                    (RuleKind::Failed, format!("run failed: {error}"))
                }
                _ if w.superstep > 0 && !w.interrupted => (
                    RuleKind::Superstep,
                    format!("superstep {} barrier", w.superstep),
                ),
                _ => continue,
            };
            self.rules.push(Rule { at, kind, text });
        }
    }

    /// Parleys: from the waypoint that asked to the node's next record, or
    /// to the end of the page while it waits.
    fn add_parleys(&mut self, waypoints: &[Waypoint], t0: SystemTime) {
        for (i, w) in waypoints.iter().enumerate() {
            let WaypointStatus::AwaitingInput { requests } = &w.status else {
                continue;
            };
            let asked = since(t0, w.created_at);
            for (node, request) in requests {
                let answered_at = waypoints[i + 1..]
                    .iter()
                    .flat_map(|later| later.records.iter())
                    .filter(|r| r.node_id == *node)
                    .map(|r| since(t0, r.started_at))
                    .find(|at| *at >= asked);
                let lane = lane_of(node, &None, &mut self.lanes);
                self.lanes[lane].marks.push(Placed {
                    start: asked,
                    end: answered_at.unwrap_or(asked),
                    mark: Mark::Parley {
                        prompt: request.prompt.clone(),
                        answered: answered_at.is_some(),
                    },
                });
            }
        }
        for lane in &mut self.lanes {
            for p in &mut lane.marks {
                if let Mark::Parley {
                    answered: false, ..
                } = p.mark
                {
                    p.end = p.end.max(self.end);
                }
            }
        }
    }
}

/// Every record once (an interrupted superstep's finished part is listed
/// again when it closes), with the superstep it ran in.
fn records_once(waypoints: &[Waypoint]) -> Vec<Ran<'_>> {
    let mut seen = HashSet::new();
    let mut records = Vec::new();
    for w in waypoints {
        let listed = w.records.iter().chain(w.completed().map(|c| &c.record));
        for r in listed {
            if seen.insert((r.node_id.clone(), r.task_key.clone(), r.started_at)) {
                records.push((w.superstep, r));
            }
        }
    }
    records
}

/// One record's attempts, laid on its lane left to right.
struct Activation<'a> {
    record: &'a NodeExecutionRecord,
    superstep: u32,
    facts: &'a TraceFacts,
    t0: SystemTime,
}

impl Activation<'_> {
    /// Milliseconds since the run began.
    fn at(&self, t: SystemTime) -> f64 {
        since(self.t0, t)
    }

    /// The traced hops when the trace has the attempt's, else the record's
    /// (a timeline drawn from waypoints alone): never both, so a hop is
    /// drawn once.
    fn hops(&self, attempt: u32) -> Vec<(String, String)> {
        let r = self.record;
        match self
            .facts
            .hops_in(&r.node_id, &r.task_key, attempt, self.superstep)
        {
            Some(traced) => traced.clone(),
            None => r
                .hops
                .iter()
                .filter(|h| h.attempt == attempt)
                .map(|h| (h.from_provider.clone(), h.to_provider.clone()))
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
            let detail = match &a.spend {
                Some(spend) => format!("{}; spent {spend}", a.error.source),
                None => a.error.source.to_string(),
            };
            marks.push(Placed {
                start: a_start,
                end: a_end,
                mark: Mark::Attempt {
                    attempt: a.attempt,
                    outcome: Outcome::of(&a.error),
                    detail: effects_of(r, a.attempt, Some(detail)),
                    hops: self.hops(a.attempt),
                    includes_wait: false,
                },
            });
            cursor = a_end;
        }
        cursor
    }

    /// How the attempt after the listed ones ended, with its notes: `None`
    /// when there is none to draw (a final failure is the last listed).
    fn closing(&self) -> Option<(Outcome, Option<String>)> {
        let r = self.record;
        let (outcome, detail) = match &r.status {
            NodeStatus::Succeeded => (Outcome::Succeeded, None),
            NodeStatus::Skipped { reason } => (Outcome::Skipped, Some(reason.clone())),
            NodeStatus::Failed if r.attempts.last().map(|a| a.attempt) == Some(r.attempt) => {
                return None;
            }
            NodeStatus::Failed => (Outcome::Unknown, None),
        };
        // What the closing attempt spent and what the activation skipped
        // go on its bar.
        let mut notes: Vec<String> = detail.into_iter().collect();
        if let Some(own) = self.closing_spend() {
            notes.push(format!("spent {own}"));
        }
        notes.extend(r.skips.iter().map(ToString::to_string));
        Some((outcome, (!notes.is_empty()).then(|| notes.join("; "))))
    }

    /// What the closing attempt spent: the activation's total less what the
    /// failed attempts spent.
    fn closing_spend(&self) -> Option<Spend> {
        let total = self.record.spend?;
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
        (outcome, detail): (Outcome, Option<String>),
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
            mark: Mark::Attempt {
                attempt: r.attempt,
                outcome,
                detail: effects_of(r, r.attempt, detail),
                hops: self.hops(r.attempt),
                includes_wait,
            },
        });
        finish
    }

    /// A final failure's skipped retries and hops go on its last failed
    /// attempt's bar (no closing bar is drawn to hold them).
    fn skips_on_last_failure(&self, marks: &mut [Placed]) {
        let r = self.record;
        if r.skips.is_empty() {
            return;
        }
        if let Some(Placed {
            mark: Mark::Attempt { detail, .. },
            ..
        }) = marks.last_mut()
        {
            let skips: Vec<String> = r.skips.iter().map(ToString::to_string).collect();
            let text = detail.get_or_insert_with(String::new);
            text.push_str("; ");
            text.push_str(&skips.join("; "));
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

/// The index of the lane of `node` (and `task`), added at the end if new.
fn lane_of(node: &NodeId, task: &Option<String>, lanes: &mut Vec<Lane>) -> usize {
    match lanes
        .iter()
        .position(|l| l.node == *node && l.task == *task)
    {
        Some(i) => i,
        None => {
            lanes.push(Lane {
                node: node.clone(),
                task: task.clone(),
                marks: Vec::new(),
            });
            lanes.len() - 1
        }
    }
}

fn handler_words(h: &HandledFailure) -> String {
    match &h.handler {
        crate::waypoint::HandlerKind::Route { to } => format!("handled: route → {to}"),
        crate::waypoint::HandlerKind::Custom { name } => format!("handled: custom {name}"),
        other => format!("handled: {}", other.name()),
    }
}
