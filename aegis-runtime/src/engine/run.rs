//! The superstep loop: run the vanguard against one snapshot, merge at the
//! barrier in vanguard order, write a waypoint, compute the next vanguard.

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use super::attempt::{ActivationResult, Budget, StepCtx};
use super::index::GraphIndex;
use super::{NodeExecutionRecord, RunOutcome, WarEngine};
use crate::aegis::ErrorHandlerSpec;
use crate::error::{EngineError, NodeError};
use crate::graph::{END, NextStep, NodeId};
use crate::state::{Battlefield, Writer, merge};
use crate::trace::TraceEvent;
use crate::waypoint::{Activation, CompletedActivation, Waypoint, WaypointStatus, WaypointStore};

/// Where a thread stands between two waypoint writes.
pub(crate) struct Cursor {
    pub(crate) thread_id: Arc<str>,
    pub(crate) fingerprint: String,
    /// The sequence number of the last waypoint written.
    pub(crate) seq: u64,
    pub(crate) superstep: u32,
    pub(crate) state: Battlefield,
    pub(crate) vanguard: Vec<Activation>,
    /// Whether `vanguard` is the superstep `superstep` itself, already begun
    /// (its visits counted), rather than the next one.
    pub(crate) interrupted: bool,
    pub(crate) completed: Vec<CompletedActivation>,
    pub(crate) visits: BTreeMap<NodeId, u32>,
}

impl Cursor {
    pub(crate) fn from_waypoint(w: Waypoint) -> Self {
        Cursor {
            thread_id: Arc::from(w.thread_id.as_str()),
            fingerprint: w.fingerprint,
            seq: w.seq,
            superstep: w.superstep,
            state: w.state,
            vanguard: w.vanguard,
            interrupted: w.interrupted,
            completed: w.completed,
            visits: w.visits,
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
            visits: self.visits.clone(),
            fingerprint: self.fingerprint.clone(),
            created_at: SystemTime::now(),
        }
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

    async fn fail(
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

    /// Drives a thread until it completes, fails or halts.
    pub(crate) async fn drive(
        &self,
        index: &GraphIndex<'_>,
        mut cur: Cursor,
        budget: Budget,
    ) -> Result<RunOutcome, EngineError> {
        let limits = &index.graph.limits;
        loop {
            if !cur.interrupted {
                if cur.vanguard.is_empty() {
                    return Ok(RunOutcome::Completed {
                        thread_id: cur.thread_id.to_string(),
                        state: cur.state,
                    });
                }
                if self.cancellation.is_cancelled() {
                    let pending = cur.vanguard.iter().map(|a| a.node_id.clone()).collect();
                    return self.halt(cur, pending, Vec::new()).await;
                }
                if let Some(e) = budget.exceeded() {
                    return self.fail(cur, e, None, Vec::new()).await;
                }
                if cur.superstep >= limits.max_supersteps {
                    let e = EngineError::RecursionLimitExceeded {
                        limit: limits.max_supersteps,
                    };
                    return self.fail(cur, e, None, Vec::new()).await;
                }
                let mut over = None;
                for a in &cur.vanguard {
                    let v = cur.visits.entry(a.node_id.clone()).or_insert(0);
                    *v += 1;
                    if *v > limits.max_node_visits && over.is_none() {
                        over = Some(a.node_id.clone());
                    }
                }
                if let Some(node) = over {
                    let e = EngineError::NodeVisitLimitExceeded {
                        node,
                        limit: limits.max_node_visits,
                    };
                    return self.fail(cur, e, None, Vec::new()).await;
                }
                cur.superstep += 1;
                cur.interrupted = true;
            }

            self.emit(TraceEvent::SuperstepStarted {
                thread_id: cur.thread_id.to_string(),
                superstep: cur.superstep,
                vanguard: cur.vanguard.iter().map(|a| a.node_id.clone()).collect(),
            });
            let done: BTreeSet<&Activation> = cur.completed.iter().map(|c| &c.activation).collect();
            let todo: Vec<Activation> = cur
                .vanguard
                .iter()
                .filter(|a| !done.contains(a))
                .cloned()
                .collect();
            let results = self.run_vanguard(index, &cur, budget, todo).await;

            let mut failures: Vec<(NodeError, bool)> = Vec::new();
            let mut pending: Vec<NodeId> = Vec::new();
            let mut records: Vec<NodeExecutionRecord> = Vec::new();
            for (activation, result) in results {
                match result {
                    ActivationResult::Done { directive, record } => {
                        cur.completed.push(CompletedActivation {
                            activation,
                            directive,
                            record,
                        });
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
            records.sort_by(|a, b| a.node_id.cmp(&b.node_id));

            if let Some((error, _)) = failures.first() {
                let run_error = if failures.iter().any(|(_, budget)| *budget) {
                    budget.error()
                } else {
                    EngineError::NodeFailed(error.clone())
                };
                let node_error = Some(error.clone());
                return self.fail(cur, run_error, node_error, records).await;
            }
            if !pending.is_empty() {
                return self.halt(cur, pending, records).await;
            }

            let writes = cur.completed.iter().map(|c| {
                (
                    Writer::node(c.activation.node_id.as_str()),
                    &c.directive.delta,
                )
            });
            let merged = match merge(&index.graph.schema, &cur.state, writes) {
                Ok(s) => s,
                Err(e) => return self.fail(cur, e.into(), None, records).await,
            };
            let next = match self.successors(index, &cur.completed, &merged).await {
                Ok(n) => n,
                Err(e) => return self.fail(cur, e, None, records).await,
            };
            cur.state = merged;
            cur.vanguard = next;
            cur.completed.clear();
            cur.interrupted = false;
            let status = if cur.vanguard.is_empty() {
                WaypointStatus::Completed
            } else {
                WaypointStatus::Running
            };
            self.write(&mut cur, status, records).await?;
            self.emit(TraceEvent::SuperstepFinished {
                thread_id: cur.thread_id.to_string(),
                superstep: cur.superstep,
                next: cur.vanguard.iter().map(|a| a.node_id.clone()).collect(),
            });
        }
    }

    /// Runs activations concurrently (at most `max_concurrency` at once)
    /// against one snapshot; returns them in the order given.
    async fn run_vanguard(
        &self,
        index: &GraphIndex<'_>,
        cur: &Cursor,
        budget: Budget,
        todo: Vec<Activation>,
    ) -> Vec<(Activation, ActivationResult)> {
        let limits = &index.graph.limits;
        let one = |activation: Activation| async move {
            let Some(entry) = index.node(activation.node_id.as_str()) else {
                // Only a waypoint store returning another graph's vanguard
                // could get here; fail the activation, not the process.
                let result = ActivationResult::undeclared(&activation.node_id);
                return (activation, result);
            };
            let step = StepCtx {
                thread_id: &cur.thread_id,
                superstep: cur.superstep,
                budget,
                spec: entry.spec,
                fingerprint: &cur.fingerprint,
                schema: &index.graph.schema,
                cache: entry.aegis.and_then(|a| a.cache.as_ref()),
                on_error: entry.aegis.and_then(|a| a.on_error.as_ref()),
                retry: entry.aegis.and_then(|a| a.retry.as_ref()),
                timeout: entry.aegis.and_then(|a| a.timeout.as_ref()),
                shutdown_grace: limits.shutdown_grace,
            };
            let result = self.run_activation(&step, &cur.state, &activation).await;
            (activation, result)
        };
        // One activation (every superstep of a chain) needs no stream.
        let mut todo = todo;
        if todo.len() == 1
            && let Some(a) = todo.pop()
        {
            return vec![one(a).await];
        }
        let mut results: Vec<(usize, (Activation, ActivationResult))> =
            futures::stream::iter(todo.into_iter().enumerate())
                .map(|(i, a)| {
                    let f = one(a);
                    async move { (i, f.await) }
                })
                .buffer_unordered(limits.max_concurrency.max(1))
                .collect()
                .await;
        results.sort_by_key(|(i, _)| *i);
        results.into_iter().map(|(_, r)| r).collect()
    }

    /// The next vanguard: every completed activation's successors, in node-id
    /// order, each node once.
    async fn successors(
        &self,
        index: &GraphIndex<'_>,
        completed: &[CompletedActivation],
        merged: &Battlefield,
    ) -> Result<Vec<Activation>, EngineError> {
        let mut next: BTreeSet<NodeId> = BTreeSet::new();
        for c in completed {
            let node = &c.activation.node_id;
            let Some(entry) = index.node(node.as_str()) else {
                continue;
            };
            match &c.directive.next {
                NextStep::Edges => {
                    next.extend(entry.successors.iter().cloned());
                    for cond in &entry.conditionals {
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
                    // A Route target is eligible by declaration.
                    let routed = matches!(
                        entry.aegis.and_then(|a| a.on_error.as_ref()),
                        Some(ErrorHandlerSpec::Route { to, .. }) if to == target
                    );
                    let allowed = routed
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
                NextStep::End => {}
            }
        }
        Ok(next.into_iter().map(Activation::node).collect())
    }
}
