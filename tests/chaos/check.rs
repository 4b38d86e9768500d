//! The invariants every chaos run must keep, checked against the model and
//! against each other (records, trace events, the nodes' own journal), for
//! a root thread and every Battalion child thread it ran.

use aegis::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

use super::faults::Scope;
use super::generate::{Body, ERRORS, GraphDef, LOG, MERGED};
use super::model::{ActResult, Expected, Failure, Outcome, task_key};
use aegis::trace::AttemptStatus;
use aegis::trace::TraceEvent;
use aegis::waypoint::AttemptRecord;
use aegis::waypoint::NodeExecutionRecord;
use aegis::waypoint::NodeStatus;
use aegis::waypoint::Waypoint;
use aegis::waypoint::WaypointStatus;

/// One execution of a node attempt, as the node itself saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Exec {
    pub(crate) segment: usize,
    pub(crate) thread: String,
    pub(crate) scope: Scope,
    pub(crate) node: usize,
    pub(crate) task: Option<u32>,
    pub(crate) superstep: u32,
    pub(crate) attempt: u32,
}

/// An attempt as both the trace and the journal name it: (thread, node id,
/// task key, superstep, attempt).
type AttemptId = (String, String, Option<String>, u32, u32);

impl Exec {
    fn id(&self, root: &GraphDef) -> AttemptId {
        let node = root.scope(self.scope).nodes[self.node].id.clone();
        (
            self.thread.clone(),
            node,
            self.task.map(task_key),
            self.superstep,
            self.attempt,
        )
    }
}

/// One `start`/`resume` call of a root thread: its engine's trace (child
/// threads' events included) and its outcome.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) index: usize,
    pub(crate) events: Vec<TraceEvent>,
    pub(crate) outcome: RunOutcome,
    /// Whether its cancellation token fired.
    pub(crate) cancelled: bool,
}

/// What one root thread left behind.
pub(crate) struct Observed<'a> {
    pub(crate) thread: &'a str,
    /// The waypoint histories of the thread and of its child threads.
    pub(crate) histories: &'a BTreeMap<String, Vec<Waypoint>>,
    pub(crate) segments: &'a [Segment],
    /// Executions of this thread's segments, child threads' included.
    pub(crate) journal: Vec<Exec>,
    /// Interceptor `before` and `after` calls per segment.
    pub(crate) before: BTreeMap<usize, usize>,
    pub(crate) after: BTreeMap<usize, usize>,
    /// Custom handler calls of this thread: (node id, attempt).
    pub(crate) custom: Vec<(String, u32)>,
    /// Whether any segment of the thread was cancelled.
    pub(crate) cancelled: bool,
}

/// The child thread of Battalion node `id` on its `visit`-th activation.
pub(crate) fn child_thread(thread: &str, id: &str, visit: u32) -> String {
    aegis::id::battalion_thread_id(thread, &NodeId::new(id), visit)
}

/// Every child run the model expects of `thread`: (child thread, model).
pub(crate) fn child_runs<'e>(
    def: &GraphDef,
    exp: &'e Expected,
    thread: &str,
) -> Vec<(String, &'e Expected)> {
    exp.steps
        .iter()
        .flat_map(|s| &s.acts)
        .filter_map(|a| {
            let child = a.child.as_deref()?;
            Some((child_thread(thread, &def.nodes[a.node].id, a.visit), child))
        })
        .collect()
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

/// A record's failed attempts against the model's. `loose`: a Battalion
/// whose child may have failed on another node than the model's first (a
/// cancelled failing superstep), so its transience may differ.
fn same_failures(label: &str, records: &[AttemptRecord], expected: &[Failure], loose: bool) {
    assert_eq!(
        records.len(),
        expected.len(),
        "{label}: failed attempts {records:?} vs model {expected:?}"
    );
    for (r, f) in records.iter().zip(expected) {
        assert_eq!(r.attempt, f.attempt, "{label}");
        let f = if loose {
            Failure {
                transience: r.error.transience,
                ..*f
            }
        } else {
            *f
        };
        assert!(
            f.matches(&r.error),
            "{label}: attempt error {:?} vs model {f:?}",
            r.error
        );
    }
}

/// A `NodeFinished` event: attempt, status, cache hit.
type Finished = (u32, AttemptStatus, bool);

/// The failing node is the first unhandled failure in vanguard order; when
/// the run was cancelled, an earlier one (another node, or another task of
/// the same muster) may have been shut down before it failed, so any
/// unhandled failure of that superstep will do.
fn same_failure(def: &GraphDef, exp: &Expected, thread: &str, e: &NodeError, cancelled: bool) {
    let Outcome::Failed { node, error, .. } = &exp.outcome else {
        panic!(
            "{thread}: failed with {e:?}, the model says {:?}",
            exp.outcome
        )
    };
    // Tasks of one muster share their node id, so the check is on the
    // failure itself, not only on the node that failed.
    let models = e.node_id.as_str() == def.nodes[*node].id && error.matches(e);
    if cancelled && !models {
        let last = exp.steps.last().expect("a failing superstep");
        let ok = last.acts.iter().any(|a| {
            def.nodes[a.node].id == e.node_id.as_str()
                && matches!(&a.result, ActResult::Failed { error, handled: None, .. } if error.matches(e))
        });
        assert!(ok, "{thread}: {e:?} is no unhandled failure of the model");
    } else {
        assert_eq!(e.node_id.as_str(), def.nodes[*node].id, "{thread}");
        assert!(error.matches(e), "{thread}: {e:?} vs model {error:?}");
    }
}

fn same_state(exp: &Expected, thread: &str, state: &Battlefield) {
    assert_eq!(strings(state, LOG), exp.log, "{thread}: merged deltas");
    let merged = state.get(MERGED).and_then(Value::as_i64).unwrap_or(0);
    assert_eq!(merged, exp.merged, "{thread}: merged count");
    assert_eq!(route_errors(state), exp.errors, "{thread}: routed errors");
}

/// The root outcome and final state equal the model's.
pub(crate) fn outcome_and_state(
    def: &GraphDef,
    exp: &Expected,
    thread: &str,
    outcome: &RunOutcome,
    cancelled: bool,
) {
    match (&exp.outcome, outcome) {
        (Outcome::Completed, RunOutcome::Completed { .. }) => {}
        // The budget ended the run: the error says so; the failing node is
        // on the waypoint (checked with the records).
        (
            Outcome::Failed { budget: true, .. } | Outcome::NoBudget,
            RunOutcome::Failed {
                error: EngineError::RunTimeoutExceeded { .. },
                ..
            },
        ) => {}
        // A cancellation cut the endless wait short (it was shut down), so
        // another unhandled failure of that superstep ended the run.
        (Outcome::Failed { budget: true, .. }, RunOutcome::Failed { error, .. }) if cancelled => {
            let e = error
                .node_error()
                .unwrap_or_else(|| panic!("{thread}: failed without a node error: {error}"));
            same_failure(def, exp, thread, e, cancelled);
        }
        (Outcome::Failed { budget: false, .. }, RunOutcome::Failed { .. }) => {
            let e = outcome
                .node_error()
                .unwrap_or_else(|| panic!("{thread}: failed without a node error: {outcome:?}"));
            same_failure(def, exp, thread, e, cancelled);
        }
        (Outcome::Violation { node, task }, RunOutcome::Failed { error, .. }) => {
            let EngineError::MusterHandlerMustBeDeltaOnly {
                node: worker,
                task_key: key,
                ..
            } = error
            else {
                panic!("{thread}: model says a task's handler broke the rule, engine says {error}")
            };
            assert_eq!(worker.as_str(), def.nodes[*node].id, "{thread}");
            assert_eq!(*key, task_key(*task), "{thread}");
        }
        (want, got) => panic!("{thread}: model says {want:?}, engine says {got:?}"),
    }
    same_state(exp, thread, outcome.state());
}

/// A child thread's last waypoint against its model.
fn child_outcome(def: &GraphDef, exp: &Expected, thread: &str, last: &Waypoint, cancelled: bool) {
    match (&exp.outcome, &last.status) {
        (Outcome::Completed, WaypointStatus::Completed) => {}
        (
            Outcome::Failed { .. },
            WaypointStatus::Failed {
                node_error: Some(e),
                ..
            },
        ) => same_failure(def, exp, thread, e, cancelled),
        (
            Outcome::NoBudget,
            WaypointStatus::Failed {
                node_error: None, ..
            },
        ) => {}
        (want, got) => panic!("{thread}: model says {want:?}, the child ended {got:?}"),
    }
    same_state(exp, thread, &last.state);
}

/// Whether the root node `node_id` (of `thread`) is a Battalion or a Gate:
/// their attempts run no node code, so the journal has none of them.
fn runs_no_code(def: &GraphDef, root: &str, thread: &str, node_id: &NodeId) -> bool {
    thread == root
        && def
            .index(node_id.as_str())
            .is_some_and(|i| matches!(def.nodes[i].body, Body::Battalion(_) | Body::Gate { .. }))
}

/// Per `start`/`resume` call: the trace's attempts are the journal's, each
/// started attempt finishes, interceptors run once per attempt (`before`)
/// and once per success (`after`); no attempt exceeds `max_attempts`.
pub(crate) fn attempts(def: &GraphDef, obs: &Observed<'_>) {
    let thread = obs.thread;
    for seg in obs.segments {
        let (mut started, mut ended, mut executed) = (Vec::new(), Vec::new(), Vec::new());
        let mut succeeded = 0;
        for ev in &seg.events {
            match ev {
                TraceEvent::NodeStarted {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                } => {
                    let id: AttemptId = (
                        thread_id.clone(),
                        node_id.to_string(),
                        task_key.clone(),
                        *superstep,
                        *attempt,
                    );
                    if !runs_no_code(def, thread, thread_id, node_id) {
                        executed.push(id.clone());
                    }
                    started.push(id);
                }
                TraceEvent::NodeFinished {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    status,
                    cache_hit: false,
                    ..
                } => {
                    ended.push((
                        thread_id.clone(),
                        node_id.to_string(),
                        task_key.clone(),
                        *superstep,
                        *attempt,
                    ));
                    if *status == AttemptStatus::Succeeded {
                        succeeded += 1;
                    }
                }
                _ => {}
            }
        }
        let mut journal: Vec<AttemptId> = obs
            .journal
            .iter()
            .filter(|e| e.segment == seg.index)
            .map(|e| e.id(def))
            .collect();
        journal.sort();
        executed.sort();
        assert_eq!(
            executed, journal,
            "{thread} segment {}: NodeStarted events vs executions",
            seg.index
        );
        started.sort();
        ended.sort();
        assert_eq!(
            ended, started,
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
        let d = def.scope(e.scope);
        assert!(
            e.attempt <= max_attempts(d, e.node),
            "{thread}: {e:?} exceeds max_attempts {}",
            max_attempts(d, e.node)
        );
    }
}

/// The records of the root thread and of every child thread it ran, and
/// the custom handler calls of all of them.
pub(crate) fn records(def: &GraphDef, exp: &Expected, obs: &Observed<'_>) {
    thread_records(def, def, exp, obs.thread, obs, true);

    // A handler ran iff the node finally failed and has one: Route and
    // Absorb show in the state; Custom calls are counted. A cancelled
    // failing superstep (of the root or of a child) may shut down a node
    // before its handler.
    let failed_somewhere = matches!(exp.outcome, Outcome::Failed { .. })
        || child_runs(def, exp, obs.thread)
            .iter()
            .any(|(_, c)| matches!(c.outcome, Outcome::Failed { .. }));
    let mut custom = obs.custom.clone();
    custom.sort();
    let mut want = exp.custom.clone();
    want.sort();
    let thread = obs.thread;
    if obs.cancelled && failed_somewhere {
        assert!(
            custom.iter().all(|c| want.contains(c)),
            "{thread}: custom handler calls {custom:?} vs model {want:?}"
        );
    } else {
        assert_eq!(custom, want, "{thread}: custom handler calls");
    }
}

/// Every superstep's records of `thread` (which runs `def`) against the
/// model, the trace and the journal; then its child threads'.
fn thread_records(
    root: &GraphDef,
    def: &GraphDef,
    exp: &Expected,
    thread: &str,
    obs: &Observed<'_>,
    is_root: bool,
) {
    let failed_run = matches!(exp.outcome, Outcome::Failed { .. });
    let last_step = exp.steps.last().map_or(0, |s| s.superstep);
    let history = obs
        .histories
        .get(thread)
        .unwrap_or_else(|| panic!("{thread}: no history fetched"));

    // NodeFinished events per (node, task, superstep), across segments in
    // order; and the thread's start/resume calls: (segment, outcome).
    let mut finished: BTreeMap<(String, Option<String>, u32), Vec<Finished>> = BTreeMap::new();
    let mut runs: Vec<(usize, &str)> = Vec::new();
    for seg in obs.segments {
        for ev in &seg.events {
            match ev {
                TraceEvent::NodeFinished {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    status,
                    cache_hit,
                    ..
                } if thread_id == thread => {
                    finished
                        .entry((node_id.to_string(), task_key.clone(), *superstep))
                        .or_default()
                        .push((*attempt, status.clone(), *cache_hit));
                }
                TraceEvent::RunFinished { thread_id, outcome } if thread_id == thread => {
                    runs.push((seg.index, outcome));
                }
                _ => {}
            }
        }
    }

    // The last non-halted waypoint of each superstep holds its records.
    let mut finals: BTreeMap<u32, &Waypoint> = BTreeMap::new();
    for w in history {
        if w.superstep > 0 && !matches!(w.status, WaypointStatus::Halted { .. }) {
            finals.insert(w.superstep, w);
        }
    }
    for step in &exp.steps {
        let s = step.superstep;
        let w = finals
            .get(&s)
            .unwrap_or_else(|| panic!("{thread}: no waypoint closes superstep {s}"));
        let by_act: BTreeMap<(&str, Option<&str>), &NodeExecutionRecord> = w
            .records
            .iter()
            .map(|r| ((r.node_id.as_str(), r.task_key.as_deref()), r))
            .collect();
        let keys: Vec<(String, Option<String>)> = step
            .acts
            .iter()
            .map(|a| (def.nodes[a.node].id.clone(), a.task.map(task_key)))
            .collect();
        // Records are listed by node id, then task key as a string.
        let mut want = keys.clone();
        want.sort();
        assert_eq!(
            by_act
                .keys()
                .map(|(n, t)| (n.to_string(), t.map(str::to_string)))
                .collect::<Vec<_>>(),
            want,
            "{thread}: records of superstep {s}"
        );
        for (act, (id, task)) in step.acts.iter().zip(&keys) {
            let label = format!("{thread}: {id} {task:?} in superstep {s}");
            let rec = by_act[&(id.as_str(), task.as_deref())];
            if matches!(&rec.status, NodeStatus::Skipped { reason } if reason == "shutdown") {
                assert!(
                    obs.cancelled && failed_run && s == last_step,
                    "{label}: skipped outside a cancelled failing superstep"
                );
                continue;
            }
            assert!(rec.attempt <= max_attempts(def, act.node), "{label}");
            let loose = obs.cancelled && act.child.is_some();
            match &act.result {
                ActResult::Succeeded { attempt } => {
                    assert_eq!(rec.status, NodeStatus::Succeeded, "{label}");
                    if rec.cache_hit {
                        assert!(act.cacheable, "{label}: a hit on an uncacheable result");
                        assert_eq!((rec.attempt, rec.attempts.len()), (1, 0), "{label}");
                    } else {
                        assert_eq!(rec.attempt, *attempt, "{label}");
                        same_failures(&label, &rec.attempts, &act.failed, loose);
                    }
                }
                ActResult::Failed { error, .. } => {
                    assert_eq!(rec.status, NodeStatus::Failed, "{label}");
                    assert!(!rec.cache_hit, "{label}");
                    assert_eq!(rec.attempt, error.attempt, "{label}");
                    same_failures(&label, &rec.attempts, &act.failed, loose);
                }
            }
            // The trace of the execution that produced the record agrees.
            let events = finished
                .get(&(id.clone(), task.clone(), s))
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
            // A Battalion that finished ran its child thread to the end the
            // child's model gives; the child keeps every invariant too.
            if let Some(child) = &act.child {
                let name = child_thread(thread, id, act.visit);
                let last = obs
                    .histories
                    .get(&name)
                    .and_then(|h| h.last())
                    .unwrap_or_else(|| panic!("{label}: no child thread {name}"));
                let child_def = root.scope(Scope::Child {
                    parent: act.node,
                    visit: act.visit,
                });
                child_outcome(child_def, child, &name, last, obs.cancelled);
                thread_records(root, child_def, child, &name, obs, false);
            }
        }
    }

    // A halted superstep's finished work is kept, never re-executed; the
    // root's halted outcome lists exactly what is left.
    let halted: Vec<&Waypoint> = history
        .iter()
        .filter(|w| matches!(w.status, WaypointStatus::Halted { .. }))
        .collect();
    let halted_runs: Vec<usize> = runs
        .iter()
        .filter(|r| r.1 == "Halted")
        .map(|r| r.0)
        .collect();
    assert_eq!(
        halted.len(),
        halted_runs.len(),
        "{thread}: one halted waypoint per halted call ({runs:?})"
    );
    if is_root {
        let halted_segments: Vec<&Segment> = obs
            .segments
            .iter()
            .filter(|s| s.outcome.name() == "Halted")
            .collect();
        for (w, seg) in halted.iter().zip(halted_segments) {
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
        }
    }
    // Every wait for input is the model's: the superstep that asked and the
    // gates that did.
    let asked: Vec<(u32, Vec<String>)> = history
        .iter()
        .filter_map(|w| match &w.status {
            WaypointStatus::AwaitingInput { requests } => Some((
                w.superstep,
                requests.iter().map(|(n, _)| n.to_string()).collect(),
            )),
            _ => None,
        })
        .collect();
    let pauses: Vec<(u32, Vec<String>)> = exp
        .pauses
        .iter()
        .map(|(s, gates)| (*s, gates.iter().map(|&g| def.nodes[g].id.clone()).collect()))
        .collect();
    assert_eq!(asked, pauses, "{thread}: waits for input");
    for (w, &segment) in halted.iter().zip(&halted_runs) {
        for r in &w.records {
            if matches!(r.status, NodeStatus::Succeeded | NodeStatus::Failed) {
                let again = obs
                    .journal
                    .iter()
                    .map(|e| (e.segment, e.id(root)))
                    .any(|(seg, e)| {
                        seg > segment
                            && e.0 == thread
                            && e.1 == r.node_id.as_str()
                            && e.2 == r.task_key
                            && e.3 == w.superstep
                    });
                assert!(
                    !again,
                    "{thread}: {} {:?} re-executed after it finished",
                    r.node_id, r.task_key
                );
            }
        }
    }
}
