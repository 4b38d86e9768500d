//! The superstep loop: run the vanguard against one snapshot, merge at the
//! barrier in vanguard order, write a waypoint, compute the next vanguard.

use futures::StreamExt;
use imbl::Vector;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;
use tracing::Instrument;

use super::attempt::{ActivationCtx, ActivationResult, NO_POLICIES, RunDeadline};
use super::index::GraphIndex;
use super::tally::VisitTally;
use super::{RunOutcome, WarEngine};
use crate::aegis::ErrorHandlerSpec;
use crate::error::{EngineError, NodeError};
use crate::graph::{GraphManifest, MusterTask, NextStep, NodeSpec, ParleyRequest};
use crate::id::{END, NodeId};
use crate::state::{Battlefield, Writer, merge};
use crate::trace::TraceEvent;
use crate::waypoint::NodeExecutionRecord;
use crate::waypoint::{
    Activation, CompletedActivation, HandledFailure, ParleyDelivery, PreviousGraph, Waypoint,
    WaypointStatus, WaypointStore,
};

/// Where a thread stands between two waypoint writes.
pub(crate) struct Cursor {
    pub(crate) thread_id: Arc<str>,
    pub(crate) fingerprint: Arc<str>,
    /// The sequence number of the last waypoint written.
    pub(crate) seq: u64,
    pub(crate) superstep: u32,
    pub(crate) state: Battlefield,
    pub(crate) vanguard: Arc<[Activation]>,
    /// Whether `vanguard` is the superstep `superstep` itself, already begun
    /// (its visits counted), rather than the next one.
    pub(crate) interrupted: bool,
    pub(crate) completed: Vector<Arc<CompletedActivation>>,
    pub(crate) parley: Option<ParleyDelivery>,
    pub(crate) visits: VisitTally,
    pub(crate) manifest: Option<Arc<GraphManifest>>,
    pub(crate) previous_graph: Option<PreviousGraph>,
    /// The thread's handled failures so far (see [`Waypoint::handled`]).
    pub(crate) handled: Vec<HandledFailure>,
}

impl Cursor {
    pub(crate) fn from_waypoint(w: Waypoint) -> Self {
        Cursor {
            thread_id: Arc::from(w.thread_id.as_str()),
            fingerprint: Arc::from(w.fingerprint),
            seq: w.seq,
            superstep: w.superstep,
            state: w.state,
            vanguard: w.vanguard,
            interrupted: w.interrupted,
            completed: w.completed,
            parley: w.parley,
            visits: VisitTally::from_visits(w.visits),
            manifest: w.manifest,
            previous_graph: w.previous_graph,
            handled: w.handled,
        }
    }

    pub(crate) fn waypoint(
        &self,
        seq: u64,
        status: WaypointStatus,
        records: Vec<NodeExecutionRecord>,
    ) -> Waypoint {
        Waypoint {
            thread_id: self.thread_id.to_string(),
            seq,
            superstep: self.superstep,
            status,
            state: self.state.clone(),
            vanguard: self.vanguard.clone(),
            interrupted: self.interrupted,
            completed: self.completed.clone(),
            records,
            parley: self.parley.clone(),
            visits: self.visits.snapshot(),
            fingerprint: self.fingerprint.to_string(),
            manifest: self.manifest.clone(),
            previous_graph: self.previous_graph.clone(),
            handled: self.handled.clone(),
            created_at: SystemTime::now(),
        }
    }
}

/// What every activation of one superstep shares, owned so that the run
/// loop may update the cursor (progress waypoints) while activations run.
struct StepEnv {
    thread_id: Arc<str>,
    superstep: u32,
    state: Battlefield,
    parley: Option<ParleyDelivery>,
    fingerprint: Arc<str>,
}

/// The activations of the superstep still to run (a resumed superstep
/// already finished some), each with its node's visit count.
fn todo(cur: &Cursor) -> Vec<(Activation, u32)> {
    let with_visit = |a: &Activation| (a.clone(), cur.visits.get(&a.node_id).max(1));
    if cur.completed.is_empty() {
        return cur.vanguard.iter().map(with_visit).collect();
    }
    let done: BTreeSet<&Activation> = cur.completed.iter().map(|c| &c.activation).collect();
    cur.vanguard
        .iter()
        .filter(|a| !done.contains(a))
        .map(with_visit)
        .collect()
}

/// Why a thread stops: the outcome still to be written and returned.
enum Ending {
    Completed,
    /// The AwaitingInput waypoint is already written.
    AwaitingInput(Vec<(NodeId, ParleyRequest)>),
    Halted {
        pending: Vec<NodeId>,
        records: Vec<NodeExecutionRecord>,
    },
    Failed {
        error: EngineError,
        /// Boxed: a `NodeError` would make every `Ending` as large.
        node_error: Option<Box<NodeError>>,
        records: Vec<NodeExecutionRecord>,
    },
}

impl Ending {
    fn failed(
        error: EngineError,
        node_error: Option<NodeError>,
        records: Vec<NodeExecutionRecord>,
    ) -> Self {
        Ending::Failed {
            error,
            node_error: node_error.map(Box::new),
            records,
        }
    }
}

fn writer(a: &Activation) -> Writer {
    Writer {
        node: a.node_id.to_string(),
        task_key: a.task_key().map(str::to_string),
    }
}

impl<S: WaypointStore> WarEngine<S> {
    pub(crate) async fn write(
        &self,
        cur: &mut Cursor,
        status: WaypointStatus,
        records: Vec<NodeExecutionRecord>,
    ) -> Result<(), EngineError> {
        let seq = cur.seq + 1;
        self.store.put(cur.waypoint(seq, status, records)).await?;
        cur.seq = seq;
        Ok(())
    }

    pub(crate) async fn fail(
        &self,
        mut cur: Cursor,
        error: EngineError,
        node_error: Option<NodeError>,
        records: Vec<NodeExecutionRecord>,
    ) -> Result<RunOutcome, EngineError> {
        let status = WaypointStatus::Failed {
            error: error.to_string(),
            node_error,
        };
        self.write(&mut cur, status, records).await?;
        Ok(RunOutcome::Failed {
            thread_id: cur.thread_id.to_string(),
            state: cur.state,
            error,
        })
    }

    async fn halt(
        &self,
        mut cur: Cursor,
        pending: Vec<NodeId>,
        records: Vec<NodeExecutionRecord>,
    ) -> Result<RunOutcome, EngineError> {
        let status = WaypointStatus::Halted {
            reason: "shutdown".to_string(),
        };
        self.write(&mut cur, status, records).await?;
        Ok(RunOutcome::Halted {
            thread_id: cur.thread_id.to_string(),
            state: cur.state,
            vanguard: pending,
        })
    }

    /// Drives a thread until it completes, fails, halts or waits for input:
    /// superstep after superstep, plan the vanguard, run it, then merge at
    /// the barrier.
    pub(crate) async fn drive(
        &self,
        index: &GraphIndex<'_>,
        mut cur: Cursor,
        run_deadline: RunDeadline,
    ) -> Result<RunOutcome, EngineError> {
        loop {
            if let Some(ending) = self.plan(index, &mut cur, run_deadline) {
                return self.end(cur, ending).await;
            }
            self.emit_with(tracing::Level::DEBUG, || TraceEvent::SuperstepStarted {
                thread_id: cur.thread_id.to_string(),
                superstep: cur.superstep,
                vanguard: cur.vanguard.iter().map(|a| a.node_id.clone()).collect(),
            });
            let todo = todo(&cur);
            let span = tracing::debug_span!("aegis.superstep", superstep = cur.superstep);
            let unfinished = self
                .run_vanguard(index, &mut cur, run_deadline, todo)
                .instrument(span)
                .await?;
            if let Some(ending) = self
                .barrier(index, &mut cur, unfinished, run_deadline)
                .await?
            {
                return self.end(cur, ending).await;
            }
        }
    }

    /// The thread's last waypoint and outcome.
    async fn end(&self, cur: Cursor, ending: Ending) -> Result<RunOutcome, EngineError> {
        match ending {
            Ending::Completed => Ok(RunOutcome::Completed {
                thread_id: cur.thread_id.to_string(),
                state: cur.state,
                handled: cur.handled,
            }),
            Ending::AwaitingInput(requests) => Ok(RunOutcome::AwaitingInput {
                thread_id: cur.thread_id.to_string(),
                state: cur.state,
                requests,
            }),
            Ending::Halted { pending, records } => self.halt(cur, pending, records).await,
            Ending::Failed {
                error,
                node_error,
                records,
            } => self.fail(cur, error, node_error.map(|e| *e), records).await,
        }
    }

    /// Opens the next superstep, unless the thread is done, cancelled, out
    /// of time or past a limit. A superstep interrupted mid-way (a crash, a
    /// halt, a parley) is continued, not opened again.
    fn plan(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        run_deadline: RunDeadline,
    ) -> Option<Ending> {
        if cur.interrupted {
            return None;
        }
        let limits = &index.graph.limits;
        if cur.vanguard.is_empty() {
            return Some(Ending::Completed);
        }
        if self.cancellation.is_cancelled() {
            let pending = cur.vanguard.iter().map(|a| a.node_id.clone()).collect();
            return Some(Ending::Halted {
                pending,
                records: Vec::new(),
            });
        }
        if let Some(e) = run_deadline.exceeded() {
            return Some(Ending::failed(e, None, Vec::new()));
        }
        if cur.superstep >= limits.max_supersteps {
            let e = EngineError::RecursionLimitExceeded {
                limit: limits.max_supersteps,
            };
            return Some(Ending::failed(e, None, Vec::new()));
        }
        // A visit is a node's activation in a superstep, however many tasks
        // a muster gives it.
        let mut over = None;
        let mut count = |node: &NodeId| {
            if cur.visits.increment(node) > limits.max_node_visits && over.is_none() {
                over = Some(node.clone());
            }
        };
        // The vanguard is sorted, so a node's tasks are adjacent; one
        // activation (every superstep of a chain) needs no set.
        match &cur.vanguard[..] {
            [one] => count(&one.node_id),
            many => {
                let nodes: BTreeSet<&NodeId> = many.iter().map(|a| &a.node_id).collect();
                nodes.into_iter().for_each(count);
            }
        }
        if let Some(node) = over {
            let e = EngineError::NodeVisitLimitExceeded {
                node,
                limit: limits.max_node_visits,
            };
            return Some(Ending::failed(e, None, Vec::new()));
        }
        cur.superstep += 1;
        cur.interrupted = true;
        None
    }

    /// The barrier: every activation of the superstep has ended. A failure
    /// fails the run and a shutdown halts it; otherwise the deltas merge in
    /// vanguard order, the next vanguard is computed and the superstep's
    /// waypoint written (AwaitingInput when an activation parleyed).
    async fn barrier(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        mut unfinished: Vec<(Activation, ActivationResult)>,
        run_deadline: RunDeadline,
    ) -> Result<Option<Ending>, EngineError> {
        // Completion order is a race; everything reported is in vanguard
        // order, so the same failures always name the same node.
        unfinished.sort_by(|a, b| a.0.cmp(&b.0));

        let mut failures: Vec<(NodeError, bool)> = Vec::new();
        let mut pending: Vec<NodeId> = Vec::new();
        let mut records: Vec<NodeExecutionRecord> = Vec::new();
        for (activation, result) in unfinished {
            match result {
                ActivationResult::Done {
                    directive,
                    record,
                    handled,
                } => {
                    cur.completed.push_back(Arc::new(CompletedActivation {
                        activation,
                        directive,
                        record,
                        handled,
                    }));
                }
                ActivationResult::Failed {
                    error,
                    record,
                    budget_exhausted,
                } => {
                    records.push(record);
                    failures.push((error, budget_exhausted));
                }
                ActivationResult::Shutdown { record } => {
                    records.push(record);
                    pending.push(activation.node_id);
                }
            }
        }
        cur.completed
            .sort_by(|a, b| a.activation.cmp(&b.activation));
        records.extend(cur.completed.iter().map(|c| c.record.clone()));
        records.sort_by(|a, b| (&a.node_id, &a.task_key).cmp(&(&b.node_id, &b.task_key)));

        if let Some((error, _)) = failures.first() {
            let run_error = if failures.iter().any(|(_, out_of_time)| *out_of_time) {
                run_deadline.error()
            } else {
                EngineError::NodeFailed(error.clone())
            };
            let node_error = Some(error.clone());
            return Ok(Some(Ending::failed(run_error, node_error, records)));
        }
        if !pending.is_empty() {
            return Ok(Some(Ending::Halted { pending, records }));
        }
        if let Some(e) = task_violation(&cur.completed) {
            return Ok(Some(Ending::failed(e, None, records)));
        }

        // A parleying activation's delta is discarded: it runs again, with
        // the answer, after resume.
        let requests: Vec<(NodeId, ParleyRequest)> = cur
            .completed
            .iter()
            .filter_map(|c| match &c.directive.next {
                NextStep::Parley(r) => Some((c.activation.node_id.clone(), r.clone())),
                _ => None,
            })
            .collect();
        let writes = cur
            .completed
            .iter()
            .filter(|c| !matches!(c.directive.next, NextStep::Parley(_)))
            .map(|c| (writer(&c.activation), &c.directive.delta));
        let merged = match merge(&index.graph.schema, &cur.state, writes) {
            Ok(s) => s,
            Err(e) => return Ok(Some(Ending::failed(e.into(), None, records))),
        };
        let mut next = match self.successors(index, &cur.completed, &merged).await {
            Ok(n) => n,
            Err(e) => return Ok(Some(Ending::failed(e, None, records))),
        };
        cur.state = merged;
        self.superstep_merged(cur, &requests);
        // Only a superstep that merged counts its compensations: one that
        // failed or halted is re-run (its completed part reused) on resume.
        cur.handled
            .extend(cur.completed.iter().filter_map(|c| c.handled.clone()));
        cur.completed.clear();
        cur.interrupted = false;
        cur.parley = None;

        if !requests.is_empty() {
            // The re-run after the answer continues the same visit (a
            // Battalion finds its child thread by it).
            for (node, _) in &requests {
                cur.visits.decrement(node);
            }
            next.extend(requests.iter().map(|(n, _)| Activation::node(n.clone())));
            next.sort();
            next.dedup();
            cur.vanguard = next.into();
            let status = WaypointStatus::AwaitingInput {
                requests: requests.clone(),
            };
            self.write(cur, status, records).await?;
            return Ok(Some(Ending::AwaitingInput(requests)));
        }

        cur.vanguard = next.into();
        let status = if cur.vanguard.is_empty() {
            WaypointStatus::Completed
        } else {
            WaypointStatus::Running
        };
        self.write(cur, status, records).await?;
        if let Some(beat) = &self.superstep_beat {
            beat.beat();
        }
        self.emit_with(tracing::Level::DEBUG, || TraceEvent::SuperstepFinished {
            thread_id: cur.thread_id.to_string(),
            superstep: cur.superstep,
            next: cur.vanguard.iter().map(|a| a.node_id.clone()).collect(),
        });
        Ok(None)
    }

    /// Runs activations concurrently (at most `max_concurrency` at once)
    /// against one snapshot. Finished activations go straight into
    /// `cur.completed`; the others are returned. In a superstep of mustered
    /// tasks, progress waypoints listing the finished tasks are written as
    /// they finish (at most about 16 per superstep), so a crash or halt
    /// re-runs only the rest.
    async fn run_vanguard(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        run_deadline: RunDeadline,
        todo: Vec<(Activation, u32)>,
    ) -> Result<Vec<(Activation, ActivationResult)>, EngineError> {
        let limits = &index.graph.limits;
        // A Battalion child's attempts get no more grace than its parent's.
        let shutdown_grace = self
            .grace_cap
            .map_or(limits.shutdown_grace, |cap| cap.min(limits.shutdown_grace));
        let env = StepEnv {
            thread_id: cur.thread_id.clone(),
            superstep: cur.superstep,
            state: cur.state.clone(),
            parley: cur.parley.clone(),
            fingerprint: cur.fingerprint.clone(),
        };
        let env = &env;
        let one = |(activation, visit): (Activation, u32)| async move {
            let Some(entry) = index.node(activation.node_id.as_str()) else {
                // Only a waypoint store returning another graph's vanguard
                // could get here; fail the activation, not the process.
                let result = ActivationResult::undeclared(&activation.node_id);
                return (activation, result);
            };
            let parley_response = env
                .parley
                .as_ref()
                .filter(|p| p.nodes.contains(&activation.node_id))
                .map(|p| &p.response);
            let act = ActivationCtx {
                thread_id: &env.thread_id,
                superstep: env.superstep,
                run_deadline,
                spec: entry.spec,
                aegis: entry.aegis.unwrap_or(&NO_POLICIES),
                fingerprint: &env.fingerprint,
                schema: &index.graph.schema,
                task: activation.task.as_ref(),
                parley_response,
                visit,
                shutdown_grace,
            };
            let result = self.run_activation(&act, &env.state, &activation).await;
            (activation, result)
        };

        let mut unfinished = Vec::new();
        // One activation (every superstep of a chain) needs no stream.
        if todo.len() == 1 {
            if let Some(a) = todo.into_iter().next() {
                let (activation, result) = one(a).await;
                unfinished.push((activation, result));
            }
            return Ok(unfinished);
        }
        let tasks = todo.iter().filter(|(a, _)| a.task.is_some()).count();
        let progress_every = if tasks > 0 {
            tasks.div_ceil(16).max(1)
        } else {
            usize::MAX
        };
        let mut since_progress = 0;
        let mut results = futures::stream::iter(todo)
            .map(one)
            .buffer_unordered(limits.max_concurrency.max(1));
        while let Some((activation, result)) = results.next().await {
            match result {
                ActivationResult::Done {
                    directive,
                    record,
                    handled,
                } => {
                    let is_task = activation.task.is_some();
                    cur.completed.push_back(Arc::new(CompletedActivation {
                        activation,
                        directive,
                        record,
                        handled,
                    }));
                    if is_task {
                        since_progress += 1;
                        if since_progress >= progress_every {
                            since_progress = 0;
                            cur.completed
                                .sort_by(|a, b| a.activation.cmp(&b.activation));
                            self.write(cur, WaypointStatus::Running, Vec::new()).await?;
                        }
                    }
                }
                other => unfinished.push((activation, other)),
            }
        }
        Ok(unfinished)
    }

    /// The next vanguard: every completed activation's successors in
    /// vanguard order (node id, then task index), each node once, plus the
    /// tasks of any muster.
    async fn successors(
        &self,
        index: &GraphIndex<'_>,
        completed: &Vector<Arc<CompletedActivation>>,
        merged: &Battlefield,
    ) -> Result<Vec<Activation>, EngineError> {
        let mut next: BTreeSet<NodeId> = BTreeSet::new();
        let mut tasks: Vec<Activation> = Vec::new();
        let mut task_keys: HashMap<NodeId, BTreeSet<String>> = HashMap::new();
        for c in completed {
            let node = &c.activation.node_id;
            let Some(entry) = index.node(node.as_str()) else {
                continue;
            };
            match &c.directive.next {
                NextStep::Edges => {
                    next.extend(entry.successors.iter().cloned());
                    for cond in entry.conditionals() {
                        let Some(evaluator) = self.edge_evaluators.get(&cond.evaluator) else {
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
                            next.insert(target);
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
                        || entry.successors.contains(target)
                        || index.graph.dynamic_targets.contains(target);
                    if !allowed {
                        return Err(EngineError::InvalidGoto {
                            node: node.clone(),
                            target: target.clone(),
                        });
                    }
                    next.insert(target.clone());
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
                    let keys = task_keys.entry(worker.clone()).or_default();
                    for (key, payload) in list {
                        let task_index = u32::try_from(keys.len()).unwrap_or(u32::MAX);
                        if !keys.insert(key.clone()) {
                            return Err(EngineError::DuplicateTaskKey {
                                node: node.clone(),
                                worker: worker.clone(),
                                task_key: key.clone(),
                            });
                        }
                        tasks.push(Activation::task(
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
        let mut out: Vec<Activation> = next.into_iter().map(Activation::node).collect();
        out.extend(tasks);
        out.sort();
        Ok(out)
    }
}

/// A mustered task contributes a delta only: anything but Edges from the
/// task itself, or from its error handler, fails the run before any routing.
fn task_violation(completed: &Vector<Arc<CompletedActivation>>) -> Option<EngineError> {
    completed.iter().find_map(|c| {
        let task = c.activation.task.as_ref()?;
        if matches!(c.directive.next, NextStep::Edges) {
            return None;
        }
        let node = c.activation.node_id.clone();
        let task_key = task.task_key.clone();
        let returned = c.directive.next.name().to_string();
        Some(if c.record.status == crate::waypoint::NodeStatus::Failed {
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
