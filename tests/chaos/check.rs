//! The invariants every chaos run must keep, checked against the model and
//! against each other (records, trace events, the nodes' own journal).

use aegis::*;
use serde_json::Value;
use std::collections::BTreeMap;

use super::generate::{ERRORS, GraphDef, LOG, MERGED};
use super::model::{ActResult, Expected, Failure, Outcome};

/// One execution of a node attempt, as the node itself saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Exec {
    pub(crate) segment: usize,
    pub(crate) node: usize,
    pub(crate) superstep: u32,
    pub(crate) attempt: u32,
}

/// One `start`/`resume` call: its engine's trace and its outcome.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) index: usize,
    pub(crate) events: Vec<TraceEvent>,
    pub(crate) outcome: RunOutcome,
    /// Whether its cancellation token fired.
    pub(crate) cancelled: bool,
}

/// What one thread left behind.
pub(crate) struct Observed<'a> {
    pub(crate) thread: &'a str,
    pub(crate) history: &'a [Waypoint],
    pub(crate) segments: &'a [Segment],
    /// Executions of this thread's segments.
    pub(crate) journal: Vec<Exec>,
    /// Interceptor `before` and `after` calls per segment.
    pub(crate) before: BTreeMap<usize, usize>,
    pub(crate) after: BTreeMap<usize, usize>,
    /// Custom handler calls of this thread: (node id, attempt).
    pub(crate) custom: Vec<(String, u32)>,
    /// Whether any segment of the thread was cancelled.
    pub(crate) cancelled: bool,
}

fn strings(state: &Battlefield, field: &str) -> Vec<String> {
    match state.get(field) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().expect("log tokens are strings").to_string())
            .collect(),
        None => Vec::new(),
        other => panic!("{field} is {other:?}"),
    }
}

fn route_errors(state: &Battlefield) -> Vec<(String, u32)> {
    match state.get(ERRORS) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                let e: NodeError = serde_json::from_value(v.clone()).expect("a NodeError");
                (e.node_id.as_str().to_string(), e.attempt)
            })
            .collect(),
        None => Vec::new(),
        other => panic!("errors is {other:?}"),
    }
}

fn max_attempts(def: &GraphDef, node: usize) -> u32 {
    def.aegis(node)
        .and_then(|a| a.retry.as_ref())
        .map_or(1, |r| r.max_attempts)
}

fn same_failures(label: &str, records: &[AttemptRecord], expected: &[Failure]) {
    assert_eq!(
        records.len(),
        expected.len(),
        "{label}: failed attempts {records:?} vs model {expected:?}"
    );
    for (r, f) in records.iter().zip(expected) {
        assert_eq!(r.attempt, f.attempt, "{label}");
        assert!(
            f.matches(&r.error),
            "{label}: attempt error {:?} vs model {f:?}",
            r.error
        );
    }
}

/// A `NodeFinished` event: attempt, status, cache hit.
type Finished = (u32, AttemptStatus, bool);

/// The outcome and final state equal the model's.
///
/// The failing node is the first unhandled failure in vanguard order; when
/// the run was cancelled, an earlier one may have been shut down before it
/// failed, so any unhandled failure of that superstep will do.
pub(crate) fn outcome_and_state(
    def: &GraphDef,
    exp: &Expected,
    thread: &str,
    outcome: &RunOutcome,
    cancelled: bool,
) {
    match (&exp.outcome, outcome) {
        (Outcome::Completed, RunOutcome::Completed { .. }) => {}
        (Outcome::Failed { node, error }, RunOutcome::Failed { .. }) => {
            let e = outcome
                .node_error()
                .unwrap_or_else(|| panic!("{thread}: failed without a node error: {outcome:?}"));
            if cancelled && e.node_id.as_str() != def.nodes[*node].id {
                let last = exp.steps.last().expect("a failing superstep");
                let ok = last.acts.iter().any(|a| {
                    def.nodes[a.node].id == e.node_id.as_str()
                        && matches!(&a.result, ActResult::Failed { error, handled: None } if error.matches(e))
                });
                assert!(ok, "{thread}: {e:?} is no unhandled failure of the model");
            } else {
                assert_eq!(e.node_id.as_str(), def.nodes[*node].id, "{thread}");
                assert!(error.matches(e), "{thread}: {e:?} vs model {error:?}");
            }
        }
        (want, got) => panic!("{thread}: model says {want:?}, engine says {got:?}"),
    }
    let state = outcome.state();
    assert_eq!(strings(state, LOG), exp.log, "{thread}: merged deltas");
    let merged = state.get(MERGED).and_then(Value::as_i64).unwrap_or(0);
    assert_eq!(merged, exp.merged, "{thread}: merged count");
    assert_eq!(route_errors(state), exp.errors, "{thread}: routed errors");
}

/// Every superstep's records against the model, the trace and the journal.
pub(crate) fn records_trace_journal(def: &GraphDef, exp: &Expected, obs: &Observed<'_>) {
    let thread = obs.thread;
    let failed_run = matches!(exp.outcome, Outcome::Failed { .. });
    let last_step = exp.steps.last().map_or(0, |s| s.superstep);

    // NodeFinished events per (node, superstep), across segments in order.
    let mut finished: BTreeMap<(String, u32), Vec<Finished>> = BTreeMap::new();
    for seg in obs.segments {
        let mut step = 0;
        let mut started: Vec<(usize, u32, u32)> = Vec::new();
        let mut ended: Vec<(usize, u32, u32)> = Vec::new();
        let mut succeeded = 0;
        for ev in &seg.events {
            match ev {
                TraceEvent::SuperstepStarted { superstep, .. } => step = *superstep,
                TraceEvent::NodeStarted {
                    node_id, attempt, ..
                } => {
                    let i = def.index(node_id.as_str()).expect("declared");
                    started.push((i, step, *attempt));
                }
                TraceEvent::NodeFinished {
                    node_id,
                    attempt,
                    status,
                    cache_hit,
                    ..
                } => {
                    let i = def.index(node_id.as_str()).expect("declared");
                    if !cache_hit {
                        ended.push((i, step, *attempt));
                        if *status == AttemptStatus::Succeeded {
                            succeeded += 1;
                        }
                    }
                    finished
                        .entry((node_id.as_str().to_string(), step))
                        .or_default()
                        .push((*attempt, status.clone(), *cache_hit));
                }
                _ => {}
            }
        }
        let mut journal: Vec<(usize, u32, u32)> = obs
            .journal
            .iter()
            .filter(|e| e.segment == seg.index)
            .map(|e| (e.node, e.superstep, e.attempt))
            .collect();
        journal.sort_unstable();
        let mut sorted = started.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted, journal,
            "{thread} segment {}: NodeStarted events vs executions",
            seg.index
        );
        ended.sort_unstable();
        assert_eq!(
            ended, sorted,
            "{thread} segment {}: every attempt started is finished",
            seg.index
        );
        assert_eq!(
            obs.before.get(&seg.index).copied().unwrap_or(0),
            started.len(),
            "{thread} segment {}: interceptor before once per attempt",
            seg.index
        );
        assert_eq!(
            obs.after.get(&seg.index).copied().unwrap_or(0),
            succeeded,
            "{thread} segment {}: interceptor after once per succeeding attempt",
            seg.index
        );
    }
    for e in &obs.journal {
        assert!(
            e.attempt <= max_attempts(def, e.node),
            "{thread}: {e:?} exceeds max_attempts {}",
            max_attempts(def, e.node)
        );
    }

    // The last non-halted waypoint of each superstep holds its records.
    let mut finals: BTreeMap<u32, &Waypoint> = BTreeMap::new();
    for w in obs.history {
        if w.superstep > 0 && !matches!(w.status, WaypointStatus::Halted { .. }) {
            finals.insert(w.superstep, w);
        }
    }
    for step in &exp.steps {
        let s = step.superstep;
        let w = finals
            .get(&s)
            .unwrap_or_else(|| panic!("{thread}: no waypoint closes superstep {s}"));
        let by_node: BTreeMap<&str, &NodeExecutionRecord> =
            w.records.iter().map(|r| (r.node_id.as_str(), r)).collect();
        let want: Vec<&str> = step
            .acts
            .iter()
            .map(|a| def.nodes[a.node].id.as_str())
            .collect();
        assert_eq!(
            by_node.keys().copied().collect::<Vec<_>>(),
            want,
            "{thread}: records of superstep {s}"
        );
        for act in &step.acts {
            let id = def.nodes[act.node].id.as_str();
            let label = format!("{thread}: {id} in superstep {s}");
            let rec = by_node[id];
            if matches!(&rec.status, NodeStatus::Skipped { reason } if reason == "shutdown") {
                assert!(
                    obs.cancelled && failed_run && s == last_step,
                    "{label}: skipped outside a cancelled failing superstep"
                );
                continue;
            }
            assert!(rec.attempt <= max_attempts(def, act.node), "{label}");
            match &act.result {
                ActResult::Succeeded { attempt } => {
                    assert_eq!(rec.status, NodeStatus::Succeeded, "{label}");
                    if rec.cache_hit {
                        assert!(act.cacheable, "{label}: a hit on an uncacheable result");
                        assert_eq!((rec.attempt, rec.attempts.len()), (1, 0), "{label}");
                    } else {
                        assert_eq!(rec.attempt, *attempt, "{label}");
                        same_failures(&label, &rec.attempts, &act.failed);
                    }
                }
                ActResult::Failed { error, .. } => {
                    assert_eq!(rec.status, NodeStatus::Failed, "{label}");
                    assert!(!rec.cache_hit, "{label}");
                    assert_eq!(rec.attempt, error.attempt, "{label}");
                    same_failures(&label, &rec.attempts, &act.failed);
                }
            }
            // The trace of the execution that produced the record agrees.
            let events = finished
                .get(&(id.to_string(), s))
                .unwrap_or_else(|| panic!("{label}: no NodeFinished event"));
            let from = events.iter().rposition(|e| e.0 == 1).unwrap_or(0);
            let last = &events[from..];
            if rec.cache_hit {
                assert_eq!(last, [(1, AttemptStatus::Succeeded, true)], "{label}");
                continue;
            }
            let traced_failures: Vec<&NodeError> = last
                .iter()
                .filter_map(|e| match &e.1 {
                    AttemptStatus::Failed(err) => Some(err),
                    _ => None,
                })
                .collect();
            let recorded: Vec<&NodeError> = rec.attempts.iter().map(|a| &a.error).collect();
            assert_eq!(traced_failures, recorded, "{label}: trace vs record");
            let (attempt, status, hit) = last.last().expect("an event");
            assert_eq!((*attempt, *hit), (rec.attempt, false), "{label}");
            match rec.status {
                NodeStatus::Succeeded => assert_eq!(*status, AttemptStatus::Succeeded, "{label}"),
                _ => assert!(matches!(status, AttemptStatus::Failed(_)), "{label}"),
            }
        }
    }

    // A halted superstep's finished work is kept, never re-executed; the
    // halted outcome lists exactly what is left.
    let halted: Vec<&Waypoint> = obs
        .history
        .iter()
        .filter(|w| matches!(w.status, WaypointStatus::Halted { .. }))
        .collect();
    assert_eq!(
        halted.len() + 1,
        obs.segments.len(),
        "{thread}: one halted waypoint per resumed segment"
    );
    for (w, seg) in halted.iter().zip(obs.segments) {
        let RunOutcome::Halted { vanguard, .. } = &seg.outcome else {
            panic!(
                "{thread}: segment {} wrote Halted but returned {:?}",
                seg.index, seg.outcome
            )
        };
        let mut pending: Vec<&NodeId> = if w.interrupted {
            w.records
                .iter()
                .filter(
                    |r| matches!(&r.status, NodeStatus::Skipped { reason } if reason == "shutdown"),
                )
                .map(|r| &r.node_id)
                .collect()
        } else {
            w.vanguard.iter().map(|a| &a.node_id).collect()
        };
        pending.sort();
        let mut listed: Vec<&NodeId> = vanguard.iter().collect();
        listed.sort();
        assert_eq!(listed, pending, "{thread}: halted vanguard");
        for r in &w.records {
            if matches!(r.status, NodeStatus::Succeeded | NodeStatus::Failed) {
                let node = def.index(r.node_id.as_str()).expect("declared");
                let again = obs
                    .journal
                    .iter()
                    .any(|e| e.segment > seg.index && e.node == node && e.superstep == w.superstep);
                assert!(
                    !again,
                    "{thread}: {} re-executed after it finished",
                    r.node_id
                );
            }
        }
    }

    // A handler ran iff the node finally failed and has one: Route and
    // Absorb show in the state; Custom calls are counted.
    let mut custom = obs.custom.clone();
    custom.sort();
    let mut want = exp.custom.clone();
    want.sort();
    if obs.cancelled && failed_run {
        assert!(
            custom.iter().all(|c| want.contains(c)),
            "{thread}: custom handler calls {custom:?} vs model {want:?}"
        );
    } else {
        assert_eq!(custom, want, "{thread}: custom handler calls");
    }
}
