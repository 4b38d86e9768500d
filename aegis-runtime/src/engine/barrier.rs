//! The barrier: every activation of the superstep has ended. A failure
//! fails the run and a shutdown halts it; otherwise the deltas merge in
//! vanguard order, the next vanguard is computed and the superstep's
//! waypoint written.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::WarEngine;
use super::attempt::activation::ActivationResult;
use super::cursor::{Cursor, sort_completed};
use super::ending::Ending;
use super::finished::Finished;
use super::index::{GraphIndex, NodeEntry};
use super::run_budget::RunBudget;
use crate::error::{EngineError, NodeError};
use crate::few::Few;
use crate::graph::{MusterTask, NextStep, NodeSpec, ParleyRequest};
use crate::id::{END, NodeId};
use crate::policy::ErrorHandlerSpec;
use crate::state::{Battlefield, MergeWriter, StateDelta, Writer, merge_with};
use crate::trace::TraceEvent;
use crate::waypoint::{
    Activation, CompletedActivation, HandledFailure, NodeExecutionRecord, NodeStatus,
    WaypointStatus, WaypointStore,
};

/// Names a writer from its activation, only when a merge refuses a write.
struct ByActivation<'a>(&'a Activation);

impl MergeWriter for ByActivation<'_> {
    fn writer(&self) -> Writer {
        Writer {
            node: self.0.node_id.to_string(),
            task_key: self.0.task_key().map(str::to_string),
        }
    }
}

/// The next vanguard as the barrier finds it.
enum NextVanguard {
    /// One node ran and took its static edges: its successors, shared
    /// from the index (already in vanguard order).
    Static(Arc<[Activation]>),
    /// Gathered from every finished activation, in any order.
    Gathered(Few<Activation>),
}

impl NextVanguard {
    /// The activations, to add to.
    fn into_few(self) -> Few<Activation> {
        match self {
            NextVanguard::Static(next) => next.iter().cloned().collect(),
            NextVanguard::Gathered(next) => next,
        }
    }

    /// The next vanguard: in vanguard order (node id, then task index),
    /// each node once (tasks are distinct by index).
    fn into_vanguard(self) -> Arc<[Activation]> {
        match self {
            NextVanguard::Static(next) => next,
            NextVanguard::Gathered(Few::Zero) => Arc::from([]),
            NextVanguard::Gathered(Few::One(only)) => Arc::from([only]),
            NextVanguard::Gathered(Few::Many(mut next)) => {
                next.sort();
                next.dedup();
                next.into()
            }
        }
    }
}

/// A superstep where an activation failed or shut down: what finished is
/// kept, so a resume runs only the rest and then merges as this would have.
fn interrupted(
    cur: &mut Cursor,
    vanguard: &[Activation],
    results: Few<(usize, ActivationResult)>,
    run_budget: &RunBudget,
) -> Ending {
    let mut failures: Vec<(NodeError, bool)> = Vec::new();
    let mut pending: Vec<NodeId> = Vec::new();
    let mut records: Vec<NodeExecutionRecord> = Vec::new();
    for (i, result) in results {
        let Some(activation) = vanguard.get(i) else {
            continue; // indexes come from this vanguard
        };
        match result {
            ActivationResult::Done {
                directive,
                record,
                handled,
            } => cur.completed.push_back(Arc::new(CompletedActivation {
                activation: activation.clone(),
                directive,
                record,
                handled,
            })),
            ActivationResult::Failed {
                error,
                record,
                budget_exhausted,
            } => {
                records.push(record);
                failures.push((*error, budget_exhausted));
            }
            ActivationResult::Shutdown { record } => {
                records.push(record);
                pending.push(activation.node_id.clone());
            }
        }
    }
    sort_completed(&mut cur.completed);
    records.extend(cur.completed.iter().map(|c| c.record.clone()));
    by_node_and_task(&mut records);
    if let Some((error, _)) = failures.first() {
        let run_error = if failures.iter().any(|(_, out_of_time)| *out_of_time) {
            run_budget.error()
        } else {
            EngineError::NodeFailed(error.clone())
        };
        let node_error = Some(error.clone());
        return Ending::failed(run_error, node_error, records);
    }
    Ending::Halted { pending, records }
}

/// The records of a superstep whose activations all finished: those kept
/// in the cursor, then those just returned, in node and task order.
///
/// A chain's one record is returned in place, not in a `Vec` the store
/// would free at once (it keeps a lone record inline); several are in an
/// exactly sized one (growing from empty reserves four records).
#[inline]
fn records_of(cur: &Cursor, results: Few<(usize, ActivationResult)>) -> Few<NodeExecutionRecord> {
    // Matched in place: an iterator over the list would first move every
    // whole result into itself, then each into its closure.
    if cur.completed.is_empty()
        && let Few::One((_, ActivationResult::Done { record, .. })) = results
    {
        return Few::One(record);
    }
    let mut records = Vec::with_capacity(cur.completed.len() + results.len());
    records.extend(cur.completed.iter().map(|c| c.record.clone()));
    match results {
        Few::One((_, ActivationResult::Done { record, .. })) => records.push(record),
        Few::Many(all) => {
            for (_, result) in all {
                if let ActivationResult::Done { record, .. } = result {
                    records.push(record);
                }
            }
        }
        Few::One(_) | Few::Zero => {}
    }
    by_node_and_task(&mut records);
    records.into()
}

fn by_node_and_task(records: &mut [NodeExecutionRecord]) {
    if records.len() > 1 {
        records.sort_by(|a, b| (&a.node_id, &a.task_key).cmp(&(&b.node_id, &b.task_key)));
    }
}

/// What a superstep's merge produced. It owns everything it holds, so no
/// borrow of the superstep's results outlives the merge.
struct Merged {
    state: Battlefield,
    next: NextVanguard,
    /// The parleys raised: their activations run again after the answer.
    requests: Vec<(NodeId, ParleyRequest)>,
    /// The compensations of the superstep's handled failures.
    handled: Vec<HandledFailure>,
}

/// Every finished activation of the superstep in vanguard order, read in
/// place: those kept in the cursor from earlier, and the `results` of
/// this call (each by its index in the vanguard, all `Done`).
#[inline]
fn finished_of<'a>(
    cur: &'a Cursor,
    results: &'a Few<(usize, ActivationResult)>,
) -> Few<Finished<'a>> {
    let mut finished: Few<Finished<'_>> = cur.completed.iter().map(|c| Finished::kept(c)).collect();
    let kept = finished.len();
    finished.extend(results.iter().filter_map(|(i, result)| match result {
        ActivationResult::Done {
            directive,
            record,
            handled,
        } => Some(Finished {
            activation: cur.step.vanguard.get(*i)?, // indexes come from this vanguard
            directive,
            handled: handled.as_deref(),
            from_handler: record.status == NodeStatus::Failed,
        }),
        _ => None,
    }));
    if kept > 0 {
        finished
            .as_mut_slice()
            .sort_by(|a, b| a.activation.cmp(b.activation));
    }
    finished
}

/// The parleys the finished activations raised. A parleying activation's
/// delta is discarded: it runs again, with the answer, after resume.
#[inline]
fn parley_requests(finished: &[Finished<'_>]) -> Vec<(NodeId, ParleyRequest)> {
    finished
        .iter()
        .filter_map(|f| match &f.directive.next {
            NextStep::Parley(r) => Some((f.activation.node_id.clone(), ParleyRequest::clone(r))),
            _ => None,
        })
        .collect()
}

/// The superstep's writes merged into the state in vanguard order; an
/// error fails the run (a task-key violation, a refused write). A
/// parleying activation's delta is not written: it runs again.
#[inline]
fn merge_writes(
    index: &GraphIndex<'_>,
    cur: &Cursor,
    finished: &[Finished<'_>],
) -> Result<Battlefield, EngineError> {
    if let Some(e) = task_violation(finished) {
        return Err(e);
    }
    let writes: Few<(ByActivation<'_>, &StateDelta)> = finished
        .iter()
        .filter(|f| !matches!(f.directive.next, NextStep::Parley(_)))
        .map(|f| (ByActivation(f.activation), &f.directive.delta))
        .collect();
    Ok(merge_with(
        &index.graph.schema,
        &cur.step.state,
        writes.as_slice(),
    )?)
}

/// Moves the cursor past a merged superstep: the status of the waypoint to
/// write, and the thread's ending when it now awaits its parleys' answers.
#[inline]
fn advance(
    index: &GraphIndex<'_>,
    cur: &mut Cursor,
    merged: Merged,
) -> (WaypointStatus, Option<Ending>) {
    let Merged {
        state,
        next,
        requests,
        handled,
    } = merged;
    cur.step.state = state;
    cur.handled.extend(handled);
    cur.completed.clear();
    cur.begun = false;
    cur.step.parley = None;
    if !requests.is_empty() {
        // The re-run after the answer continues the same visit (a
        // Battalion finds its child thread by it).
        for (node, _) in &requests {
            cur.visits.decrement(index, node);
        }
        let mut next = next.into_few();
        next.extend(requests.iter().map(|(n, _)| Activation::node(n.clone())));
        cur.step.vanguard = NextVanguard::Gathered(next).into_vanguard();
        let status = WaypointStatus::AwaitingInput {
            requests: requests.clone(),
        };
        return (status, Some(Ending::AwaitingInput(requests)));
    }
    cur.step.vanguard = next.into_vanguard();
    let status = if cur.step.vanguard.is_empty() {
        WaypointStatus::Completed
    } else {
        WaypointStatus::Running
    };
    (status, None)
}

impl<S: WaypointStore> WarEngine<S> {
    /// Closes the superstep whose activations ended in `results` in this
    /// call (each by its index in the vanguard; those that finished earlier
    /// are in `cur.completed`). `None` when the run goes on. `solo` is the
    /// node of a vanguard of one (see `drive`).
    pub(crate) async fn barrier(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        mut results: Few<(usize, ActivationResult)>,
        run_budget: &RunBudget,
        solo: Option<NodeEntry<'_>>,
    ) -> Result<Option<Ending>, EngineError> {
        // Completion order is a race; everything reported is in vanguard
        // order, so the same failures always name the same node.
        results.as_mut_slice().sort_unstable_by_key(|(i, _)| *i);
        let all_done = results
            .iter()
            .all(|(_, r)| matches!(r, ActivationResult::Done { .. }));
        if !all_done {
            let vanguard = cur.step.vanguard.clone();
            return Ok(Some(interrupted(cur, &vanguard, results, run_budget)));
        }
        // Merge in vanguard order, then find the next vanguard. The two
        // awaits stay in this function: a step of its own would be one more
        // future to build and move per superstep.
        let merged = {
            let finished = finished_of(cur, &results);
            match merge_writes(index, cur, finished.as_slice()) {
                Err(e) => Err(e),
                Ok(state) => match self
                    .successors(index, finished.as_slice(), &state, solo)
                    .await
                {
                    Err(e) => Err(e),
                    Ok(next) => {
                        let requests = parley_requests(finished.as_slice());
                        self.superstep_merged(cur, &state, finished.as_slice(), &requests);
                        // Only a superstep that merged counts its
                        // compensations: one that failed or halted is re-run
                        // (its completed part reused) on resume.
                        let handled = finished.iter().filter_map(|f| f.handled.cloned()).collect();
                        Ok(Merged {
                            state,
                            next,
                            requests,
                            handled,
                        })
                    }
                },
            }
        };
        // The records move into the waypoint (or the failure) only now that
        // nothing borrows the results.
        let records = records_of(cur, results);
        let merged = match merged {
            Ok(merged) => merged,
            Err(e) => return Ok(Some(Ending::failed(e, None, records.into()))),
        };
        let (status, ending) = advance(index, cur, merged);
        self.write(cur, status, records).await?;
        if ending.is_some() {
            return Ok(ending);
        }
        if let Some(beat) = &self.kit.superstep_beat {
            beat.beat();
        }
        self.kit
            .emit_with(tracing::Level::DEBUG, || TraceEvent::SuperstepFinished {
                thread_id: cur.step.thread_id.to_string(),
                superstep: cur.superstep,
                next: cur
                    .step
                    .vanguard
                    .iter()
                    .map(|a| a.node_id.clone())
                    .collect(),
            });
        Ok(None)
    }

    /// The next vanguard: every finished activation's successors in
    /// vanguard order (node id, then task index), each node once, plus the
    /// tasks of any muster. One node that took its static edges hands on
    /// its successors as the index keeps them.
    async fn successors(
        &self,
        index: &GraphIndex<'_>,
        finished: &[Finished<'_>],
        merged: &Battlefield,
        solo: Option<NodeEntry<'_>>,
    ) -> Result<NextVanguard, EngineError> {
        if let [only] = finished
            && matches!(only.directive.next, NextStep::Edges)
            && let Some(entry) = solo.or_else(|| index.node(only.activation.node_id.as_str()))
            && !entry.has_conditionals()
        {
            return Ok(NextVanguard::Static(entry.successors.clone()));
        }
        let mut next: Few<Activation> = Few::default();
        // Each worker's task keys so far, to refuse a repeated one.
        let mut task_keys: HashMap<&NodeId, HashSet<&str>> = HashMap::new();
        for f in finished {
            let node = &f.activation.node_id;
            let Some(entry) = index.node(node.as_str()) else {
                continue;
            };
            match &f.directive.next {
                NextStep::Edges => {
                    next.extend(entry.successors.iter().cloned());
                    for cond in entry.conditionals() {
                        let Some(evaluator) = self.kit.edge_evaluators.get(&cond.evaluator) else {
                            continue; // registration is checked at start/resume
                        };
                        let chosen = evaluator.evaluate(merged).await.map_err(|e| {
                            EngineError::EdgeEvaluatorFailed {
                                node: node.clone(),
                                evaluator: cond.evaluator.clone(),
                                message: e.message,
                            }
                        })?;
                        for target in chosen {
                            if target.as_str() == END {
                                continue;
                            }
                            if !cond.targets.contains(&target) {
                                return Err(EngineError::ConditionalTargetNotDeclared {
                                    node: node.clone(),
                                    evaluator: cond.evaluator.clone(),
                                    target,
                                });
                            }
                            next.push(Activation::node(target));
                        }
                    }
                }
                NextStep::Goto(target) => {
                    if target.as_str() == END {
                        continue;
                    }
                    // Route and Gate targets are eligible by declaration.
                    let routed = matches!(
                        entry.aegis.and_then(|a| a.on_error.as_ref()),
                        Some(ErrorHandlerSpec::Route { to, .. }) if to == target
                    );
                    let gated = matches!(
                        entry.spec,
                        NodeSpec::Gate { approve, reject, .. } if approve == target || reject == target
                    );
                    let allowed = routed
                        || gated
                        || entry.successors.iter().any(|a| a.node_id == *target)
                        || index.graph.dynamic_targets.contains(target);
                    if !allowed {
                        return Err(EngineError::InvalidGoto {
                            node: node.clone(),
                            target: target.clone(),
                        });
                    }
                    next.push(Activation::node(target.clone()));
                }
                NextStep::Muster {
                    worker,
                    tasks: list,
                } => {
                    if !index.graph.is_worker_template(worker) {
                        return Err(EngineError::MusterWorkerNotTemplate {
                            node: node.clone(),
                            worker: worker.clone(),
                        });
                    }
                    if !index.graph.muster_allowed(node, worker) {
                        return Err(EngineError::MusterUndeclared {
                            node: node.clone(),
                            worker: worker.clone(),
                        });
                    }
                    let keys = task_keys.entry(worker).or_default();
                    keys.reserve(list.len());
                    for (key, payload) in list {
                        let task_index = u32::try_from(keys.len()).unwrap_or(u32::MAX);
                        if !keys.insert(key.as_str()) {
                            return Err(EngineError::DuplicateTaskKey {
                                node: node.clone(),
                                worker: worker.clone(),
                                task_key: key.clone(),
                            });
                        }
                        next.push(Activation::task(
                            worker.clone(),
                            MusterTask {
                                task_key: key.clone(),
                                payload: payload.clone(),
                                index: task_index,
                            },
                        ));
                    }
                }
                NextStep::End | NextStep::Parley(_) => {}
            }
        }
        Ok(NextVanguard::Gathered(next))
    }
}

/// A mustered task contributes a delta only: anything but Edges from the
/// task itself, or from its error handler, fails the run before any routing.
fn task_violation(finished: &[Finished<'_>]) -> Option<EngineError> {
    finished.iter().find_map(|f| {
        let task = f.activation.task.as_ref()?;
        if matches!(f.directive.next, NextStep::Edges) {
            return None;
        }
        let node = f.activation.node_id.clone();
        let task_key = task.task_key.clone();
        let returned = f.directive.next.name().to_string();
        Some(if f.from_handler {
            EngineError::MusterHandlerMustBeDeltaOnly {
                node,
                task_key,
                returned,
            }
        } else {
            EngineError::MusterTaskMustReturnEdges {
                node,
                task_key,
                returned,
            }
        })
    })
}
