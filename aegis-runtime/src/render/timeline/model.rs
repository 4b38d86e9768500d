//! The model: lanes of marks on one time axis, in milliseconds since the run
//! began, built from the waypoints and what the trace adds.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, SystemTime};

use super::facts::{Hop, TraceFacts};
use crate::error::{NodeError, NodeErrorSource, TimeoutKind, Transience};
use crate::graph::EffectNote;
use crate::id::NodeId;
use crate::policy::{Skip, Spend};
use crate::trace::TraceEvent;
use crate::waypoint::{HandlerKind, NodeExecutionRecord, NodeStatus, Waypoint, WaypointStatus};

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
    pub(super) attempt: u32,
    pub(super) outcome: Outcome,
    pub(super) notes: Vec<Note>,
    /// What became of each of its effects.
    pub(super) effects: Vec<EffectNote>,
    /// Fallback hops reported during this attempt.
    pub(super) hops: Vec<Hop>,
    /// The bar includes an unknown backoff before the attempt.
    pub(super) includes_wait: bool,
}

#[derive(Debug, Clone)]
pub(super) enum Mark {
    Attempt(Attempt),
    Backoff {
        before_attempt: u32,
    },
    CacheHit,
    /// A final failure its `on_error` handler compensated.
    Handled {
        handler: HandlerKind,
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
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum RuleKind {
    /// The superstep numbered ended.
    Barrier(u32),
    /// The run halted, for the reason given.
    Halted(String),
    /// The run failed, with the error given.
    Failed(String),
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

/// What became of each effect of `r`'s attempt `attempt`.
fn effects_of(r: &NodeExecutionRecord, attempt: u32) -> Vec<EffectNote> {
    r.effects
        .iter()
        .filter(|e| e.attempt == attempt)
        .cloned()
        .collect()
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
                    handler: h.handler.clone(),
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
            let kind = match &w.status {
                WaypointStatus::Halted { reason } => RuleKind::Halted(reason.clone()),
                WaypointStatus::Failed { error, .. } => RuleKind::Failed(error.clone()),
                _ if w.superstep > 0 && !w.interrupted => RuleKind::Barrier(w.superstep),
                _ => continue,
            };
            self.rules.push(Rule { at, kind });
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
    fn hops(&self, attempt: u32) -> Vec<Hop> {
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
            .chain(r.skips.iter().cloned().map(Note::NotSent))
            .collect();
        Some((outcome, notes))
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
        if r.skips.is_empty() {
            return;
        }
        if let Some(Placed {
            mark: Mark::Attempt(last),
            ..
        }) = marks.last_mut()
        {
            last.notes
                .extend(r.skips.iter().cloned().map(Note::NotSent));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Battlefield;
    use crate::waypoint::{AttemptRecord, HandledFailure};

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000) + Duration::from_millis(ms)
    }

    fn failed(node: &str, attempt: u32, started: u64, source: NodeErrorSource) -> AttemptRecord {
        let transience = match &source {
            NodeErrorSource::Function { message } if message == "503" => Transience::Transient,
            NodeErrorSource::Timeout(_) => Transience::Transient,
            _ => Transience::Permanent,
        };
        AttemptRecord {
            attempt,
            started_at: at(started),
            duration_ms: 10,
            error: NodeError::new(NodeId::new(node), attempt, transience, source),
            spend: None,
        }
    }

    fn function(message: &str) -> NodeErrorSource {
        NodeErrorSource::Function {
            message: message.to_string(),
        }
    }

    /// Superstep 1: `flaky` fails once and succeeds after a traced 100ms
    /// wait, `slow` times out once and succeeds (its wait untraced),
    /// `doomed` fails for good and is routed to `refund`. Then the run
    /// halts.
    fn run() -> (Vec<Waypoint>, Vec<TraceEvent>) {
        let record = |node: &str, status, attempt, attempts| {
            NodeExecutionRecord::new(NodeId::new(node), status, attempt, at(0), 150)
                .with_attempts(attempts)
        };
        let records = vec![
            record(
                "flaky",
                NodeStatus::Succeeded,
                2,
                vec![failed("flaky", 1, 0, function("503"))],
            ),
            record(
                "slow",
                NodeStatus::Succeeded,
                2,
                vec![failed(
                    "slow",
                    1,
                    0,
                    NodeErrorSource::Timeout(TimeoutKind::Run),
                )],
            ),
            record(
                "doomed",
                NodeStatus::Failed,
                1,
                vec![failed("doomed", 1, 0, function("card declined"))],
            ),
        ];
        let handled = HandledFailure {
            node_id: NodeId::new("doomed"),
            task_key: None,
            superstep: 1,
            error: NodeError::new(
                NodeId::new("doomed"),
                1,
                Transience::Permanent,
                function("card declined"),
            ),
            handler: HandlerKind::Route {
                to: NodeId::new("refund"),
            },
        };
        let mut barrier = Waypoint::new("t", 1, WaypointStatus::Running, Battlefield::new())
            .with_superstep(1)
            .with_records(records)
            .with_handled(vec![handled]);
        barrier.created_at = at(200);
        let halted = WaypointStatus::Halted {
            reason: "operator".to_string(),
        };
        let mut halt = Waypoint::new("t", 2, halted, Battlefield::new()).with_superstep(1);
        halt.created_at = at(300);
        let trace = vec![TraceEvent::RetryScheduled {
            thread_id: "t".to_string(),
            superstep: 1,
            node_id: NodeId::new("flaky"),
            attempt: 2,
            delay: Duration::from_millis(100),
        }];
        (vec![barrier, halt], trace)
    }

    fn marks<'m>(model: &'m Model, node: &str) -> Vec<&'m Mark> {
        let lane = model.lanes.iter().find(|l| l.node.as_str() == node);
        lane.map(|l| l.marks.iter().map(|p| &p.mark).collect())
            .unwrap_or_default()
    }

    fn attempt(mark: &Mark) -> Option<&Attempt> {
        match mark {
            Mark::Attempt(a) => Some(a),
            _ => None,
        }
    }

    #[test]
    fn a_retry_is_a_failed_attempt_a_backoff_and_the_closing_attempt() {
        let (waypoints, trace) = run();
        let model = Model::build(&waypoints, &trace);
        let flaky = marks(&model, "flaky");
        assert_eq!(flaky.len(), 3, "{flaky:#?}");
        let first = attempt(flaky[0]).expect("an attempt first");
        assert_eq!((first.attempt, first.outcome), (1, Outcome::Transient));
        assert_eq!(first.notes, vec![Note::Error(function("503"))]);
        assert!(matches!(flaky[1], Mark::Backoff { before_attempt: 2 }));
        let last = attempt(flaky[2]).expect("the closing attempt");
        assert_eq!((last.attempt, last.outcome), (2, Outcome::Succeeded));
        assert!(!last.includes_wait, "the trace has its wait");
        assert_eq!(
            model.attempts, 5,
            "two each for flaky and slow, one for doomed"
        );
    }

    #[test]
    fn a_timeout_names_its_bound_and_an_untraced_wait_stays_in_the_bar() {
        let (waypoints, trace) = run();
        let model = Model::build(&waypoints, &trace);
        let slow = marks(&model, "slow");
        let outcomes: Vec<Outcome> = slow
            .iter()
            .filter_map(|m| attempt(m))
            .map(|a| a.outcome)
            .collect();
        assert_eq!(
            outcomes,
            vec![Outcome::Timeout(TimeoutKind::Run), Outcome::Succeeded]
        );
        assert!(slow.iter().all(|m| !matches!(m, Mark::Backoff { .. })));
        assert!(attempt(slow[1]).is_some_and(|a| a.includes_wait));
    }

    #[test]
    fn a_handled_failure_carries_its_handler_and_the_rules_their_kinds() {
        let (waypoints, trace) = run();
        let model = Model::build(&waypoints, &trace);
        let doomed = marks(&model, "doomed");
        assert_eq!(doomed.len(), 2, "the failure is the last listed attempt");
        assert!(attempt(doomed[0]).is_some_and(|a| a.outcome == Outcome::Permanent));
        assert!(matches!(
            doomed[1],
            Mark::Handled { handler: HandlerKind::Route { to } } if to.as_str() == "refund"
        ));
        let kinds: Vec<&RuleKind> = model.rules.iter().map(|r| &r.kind).collect();
        assert_eq!(
            kinds,
            vec![
                &RuleKind::Barrier(1),
                &RuleKind::Halted("operator".to_string())
            ]
        );
    }
}
