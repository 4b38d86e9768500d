//! The model: lanes of marks on one time axis, in milliseconds since the run
//! began, built from the waypoints and what the trace adds.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use super::activation::{Activation, since};
use super::facts::TraceFacts;
use super::marks::{Lane, Mark, Placed, Rule, RuleKind};
use crate::id::NodeId;
use crate::policy::Spend;
use crate::trace::TraceEvent;
use crate::waypoint::{NodeExecutionRecord, Waypoint, WaypointStatus};

/// What the page shows: the lanes in order, the rules across them, and
/// the summary.
#[derive(Debug)]
pub(super) struct Model {
    pub(super) lanes: Vec<Lane>,
    pub(super) rules: Vec<Rule>,
    /// Where the page ends, in ms since the run began.
    pub(super) end: f64,
    /// The last waypoint's status.
    pub(super) status: &'static str,
    /// The last superstep reached.
    pub(super) supersteps: u32,
    /// Attempts drawn (a cache hit is none).
    pub(super) attempts: usize,
    /// What the thread's model calls spent, when any was metered.
    pub(super) spend: Option<Spend>,
}

/// A record with the superstep it ran in.
type Ran<'w> = (u32, &'w NodeExecutionRecord);

impl Model {
    /// The model of `waypoints` (all of one thread, in `seq` order) with
    /// what `trace` adds.
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
            status: waypoints.last().map_or("no waypoints", |w| w.status.name()),
            supersteps: waypoints.iter().map(|w| w.superstep).max().unwrap_or(0),
            attempts: 0,
            spend: records
                .iter()
                .filter_map(|(_, r)| r.spend())
                .reduce(|a, b| a.plus(&b)),
        };
        for &(superstep, record) in &records {
            model.add_activation(&Activation::new(record, superstep, &facts, t0));
        }
        model.order_lanes(waypoints);
        model.add_handled(waypoints, &records, t0);
        model.add_rules(waypoints, t0);
        model.add_parleys(waypoints, t0);
        model
    }

    /// One activation's marks on its lane.
    fn add_activation(&mut self, a: &Activation<'_>) {
        let r = a.record();
        let lane = lane_of(&r.node_id, &r.task_key, &mut self.lanes);
        let (end, attempts) = a.lay(&mut self.lanes[lane].marks);
        self.end = self.end.max(end);
        self.attempts += attempts;
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
    use std::time::Duration;

    use super::*;
    use crate::error::{NodeError, NodeErrorSource, TimeoutKind, Transience};
    use crate::render::timeline::marks::{Attempt, Note, Outcome};
    use crate::state::Battlefield;
    use crate::waypoint::{AttemptRecord, HandledFailure, HandlerKind, NodeStatus};

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
