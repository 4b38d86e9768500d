//! The superstep loop: run the vanguard against one snapshot, merge at the
//! barrier in vanguard order, write a waypoint, compute the next vanguard.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tracing::Instrument;

use super::WarEngine;
use super::attempt::activation::{ActivationCtx, ActivationResult, NO_POLICIES};
use super::attempt::{node_span, node_span_ended};
use super::cursor::{Cursor, Step, sort_completed};
use super::ending::Ending;
use super::index::{GraphIndex, NodeEntry};
use super::outcome::RunOutcome;
use super::run_budget::RunBudget;
use crate::error::{EngineError, NodeError, StoreError};
use crate::few::Few;
use crate::graph::{MusterTask, TaskRef, TaskSource};
use crate::id::NodeId;
use crate::trace::TraceEvent;
use crate::waypoint::NodeExecutionRecord;
use crate::waypoint::{Activation, CompletedActivation, Draft, WaypointStatus, WaypointStore};

/// What every activation of one superstep shares.
struct StepEnv<'c> {
    step: &'c Step,
    /// The vanguard as its tasks' contexts read it; `None` without tasks.
    tasks: Option<Arc<dyn TaskSource>>,
    superstep: u32,
    /// The index's key seeds are made from this graph's fingerprint; a run
    /// carrying another (never, after a resume's check) derives its keys
    /// from scratch.
    seeds_fit: bool,
    run_budget: &'c RunBudget,
    shutdown_grace: std::time::Duration,
}

impl<'c> StepEnv<'c> {
    fn new(
        step: &'c Step,
        superstep: u32,
        index: &GraphIndex<'_>,
        run_budget: &'c RunBudget,
        shutdown_grace: std::time::Duration,
    ) -> Self {
        let vanguard = &step.vanguard;
        StepEnv {
            step,
            tasks: vanguard
                .iter()
                .any(|a| a.task.is_some())
                .then(|| Arc::new(VanguardTasks(vanguard.clone())) as Arc<dyn TaskSource>),
            superstep,
            seeds_fit: *index.graph.shared_fingerprint() == *step.fingerprint,
            run_budget,
            shutdown_grace,
        }
    }
}

/// A superstep with tasks keeps what finished in the cursor, and writes a
/// progress waypoint every sixteenth of its tasks, so a crash mid-muster
/// re-runs only the tasks that had not finished.
struct Progress {
    tasks: usize,
    every: usize,
    since: usize,
    /// Whether `cur.completed` is in vanguard order: tasks mostly finish
    /// in the order they started, so a progress waypoint rarely needs a
    /// sort, and never a sort of the persistent vector in place.
    in_order: bool,
}

impl Progress {
    fn new(env: &StepEnv<'_>, todo: &Few<(usize, u32)>, cur: &Cursor) -> Self {
        let is_task = |i: usize| env.step.vanguard.get(i).is_some_and(|a| a.task.is_some());
        let tasks = todo.iter().filter(|(i, _)| is_task(*i)).count();
        Progress {
            tasks,
            every: if tasks > 0 {
                tasks.div_ceil(16).max(1)
            } else {
                usize::MAX
            },
            since: 0,
            in_order: cur
                .completed
                .iter()
                .zip(cur.completed.iter().skip(1))
                .all(|(a, b)| a.activation <= b.activation),
        }
    }

    /// The activation `i` is, when this superstep keeps what finishes (it
    /// has tasks); any other's result goes back to the barrier.
    fn kept<'e>(&self, env: &StepEnv<'e>, i: usize) -> Option<&'e Activation> {
        env.step.vanguard.get(i).filter(|_| self.tasks > 0)
    }

    /// Keeps `done` in the cursor; true when a progress waypoint is due
    /// (the cursor's finished activations are then in vanguard order).
    fn keep(&mut self, cur: &mut Cursor, done: CompletedActivation) -> bool {
        self.in_order &= cur
            .completed
            .last()
            .is_none_or(|last| last.activation <= done.activation);
        self.since += usize::from(done.activation.task.is_some());
        cur.completed.push_back(Arc::new(done));
        if self.since < self.every {
            return false;
        }
        self.since = 0;
        if !self.in_order {
            sort_completed(&mut cur.completed);
            self.in_order = true;
        }
        true
    }
}

/// A superstep's vanguard as the attempts of its tasks read them.
struct VanguardTasks(Arc<[Activation]>);

impl TaskSource for VanguardTasks {
    fn task(&self, index: usize) -> Option<&MusterTask> {
        self.0.get(index)?.task.as_ref()
    }
}

/// The activations of the superstep still to run (a resumed superstep
/// already finished some), each by its index in the vanguard and with its
/// node's visit count.
fn todo(index: &GraphIndex<'_>, cur: &Cursor) -> Few<(usize, u32)> {
    let with_visit = |(i, a): (usize, &Activation)| (i, cur.visits.get(index, &a.node_id).max(1));
    if cur.completed.is_empty() {
        return cur
            .step
            .vanguard
            .iter()
            .enumerate()
            .map(with_visit)
            .collect();
    }
    let done: BTreeSet<&Activation> = cur.completed.iter().map(|c| &c.activation).collect();
    cur.step
        .vanguard
        .iter()
        .enumerate()
        .filter(|(_, a)| !done.contains(a))
        .map(with_visit)
        .collect()
}

/// What [`WarEngine::plan`] found: a superstep to run, or the thread's end.
enum Planned {
    /// The activations to run, by index in the vanguard, with their visits.
    Run(Few<(usize, u32)>),
    End(Ending),
}

impl<S: WaypointStore> WarEngine<S> {
    pub(crate) async fn write(
        &self,
        cur: &mut Cursor,
        status: WaypointStatus,
        records: Few<NodeExecutionRecord>,
    ) -> Result<(), EngineError> {
        let seq = cur.seq + 1;
        self.put_draft(&mut cur.draft(seq, status, records)).await?;
        cur.seq = seq;
        Ok(())
    }

    /// Stores the waypoint `draft` describes. The engine's own in-memory
    /// store keeps the draft as it is, lent in place (a draft is 312
    /// bytes: every move is a copy); any other store gets the public
    /// `Waypoint` through [`WaypointStore::put`].
    pub(crate) async fn put_draft(&self, draft: &mut Draft<'_>) -> Result<(), StoreError> {
        match &self.memory_store {
            Some(memory) => memory.append(draft),
            None => self.store.put(draft.take_waypoint()).await,
        }
    }

    pub(crate) async fn fail(
        &self,
        mut cur: Cursor,
        error: EngineError,
        node_error: Option<Box<NodeError>>,
        records: Vec<NodeExecutionRecord>,
    ) -> Result<RunOutcome, EngineError> {
        let status = WaypointStatus::Failed {
            error: error.to_string(),
            node_error,
        };
        self.write(&mut cur, status, records.into()).await?;
        Ok(RunOutcome::Failed {
            thread_id: cur.step.thread_id.to_string(),
            state: cur.step.state,
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
        self.write(&mut cur, status, records.into()).await?;
        Ok(RunOutcome::Halted {
            thread_id: cur.step.thread_id.to_string(),
            state: cur.step.state,
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
        run_budget: RunBudget,
    ) -> Result<RunOutcome, EngineError> {
        // The node that ran alone in the superstep before, if one did.
        let mut previous = None;
        loop {
            // A superstep of one activation (every one of a chain) looks its
            // node up once: for its visit count, its run and the next
            // vanguard. `solo` is that node's entry, and `None` for any
            // other vanguard; plan, run_vanguard and the barrier rely on it.
            // A chain's next node is its previous one's sole successor,
            // found by position.
            let solo = index.solo_after(previous, &cur.step.vanguard);
            previous = solo;
            let todo = match self.plan(index, &mut cur, &run_budget, solo) {
                Planned::Run(todo) => todo,
                Planned::End(ending) => return self.end(cur, ending).await,
            };
            self.kit
                .emit_with(tracing::Level::DEBUG, || TraceEvent::SuperstepStarted {
                    thread_id: cur.step.thread_id.to_string(),
                    superstep: cur.superstep,
                    vanguard: cur
                        .step
                        .vanguard
                        .iter()
                        .map(|a| a.node_id.clone())
                        .collect(),
                });
            let span = tracing::debug_span!(
                "aegis.superstep",
                thread_id = %cur.step.thread_id,
                superstep = cur.superstep,
                activations = cur.step.vanguard.len(),
            );
            // Pinned in place: the span wraps a pointer, not a move of the
            // whole superstep's future.
            let unfinished = {
                let step =
                    std::pin::pin!(self.run_vanguard(index, &mut cur, &run_budget, todo, solo));
                step.instrument(span).await?
            };
            if let Some(ending) = self
                .barrier(index, &mut cur, unfinished, &run_budget, solo)
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
                thread_id: cur.step.thread_id.to_string(),
                state: cur.step.state,
                handled: cur.handled,
            }),
            Ending::AwaitingInput(requests) => Ok(RunOutcome::AwaitingInput {
                thread_id: cur.step.thread_id.to_string(),
                state: cur.step.state,
                requests,
            }),
            Ending::Halted { pending, records } => self.halt(cur, pending, records).await,
            Ending::Failed {
                error,
                node_error,
                records,
            } => self.fail(cur, error, node_error, records).await,
        }
    }

    /// Opens the next superstep, unless the thread is done, cancelled, out
    /// of time or past a limit, and lists the activations to run. A
    /// superstep interrupted mid-way (a crash, a halt, a parley) is
    /// continued, not opened again.
    fn plan(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        run_budget: &RunBudget,
        solo: Option<NodeEntry<'_>>,
    ) -> Planned {
        if cur.begun {
            return Planned::Run(todo(index, cur));
        }
        let limits = &index.graph.limits;
        if cur.step.vanguard.is_empty() {
            return Planned::End(Ending::Completed);
        }
        if self.kit.cancellation().is_cancelled() {
            let pending = cur
                .step
                .vanguard
                .iter()
                .map(|a| a.node_id.clone())
                .collect();
            return Planned::End(Ending::Halted {
                pending,
                records: Vec::new(),
            });
        }
        if let Some(e) = run_budget.exceeded() {
            return Planned::End(Ending::failed(e, None, Vec::new()));
        }
        // Nothing left of the spend budget: no further superstep, as none
        // starts past the time budget.
        if run_budget.spend_exhausted() {
            return Planned::End(Ending::failed(run_budget.error(), None, Vec::new()));
        }
        if cur.superstep >= limits.max_supersteps {
            let e = EngineError::RecursionLimitExceeded {
                limit: limits.max_supersteps,
            };
            return Planned::End(Ending::failed(e, None, Vec::new()));
        }
        // A visit is a node's activation in a superstep, however many tasks
        // a muster gives it.
        let mut over = None;
        let mut count = |position: Option<usize>, node: &NodeId| {
            let visit = cur.visits.increment(position, node);
            if visit > limits.max_node_visits && over.is_none() {
                over = Some(node.clone());
            }
            visit
        };
        // The vanguard is sorted, so a node's tasks are adjacent; one
        // activation (every superstep of a chain) needs no set, and its
        // visit is the count just made, not a second lookup.
        let single = match &cur.step.vanguard[..] {
            // `solo` is `None` here only for a node the graph lacks, which
            // a lookup would not find either.
            [one] => Some(count(solo.map(|e| e.position), &one.node_id)),
            many => {
                let nodes: BTreeSet<&NodeId> = many.iter().map(|a| &a.node_id).collect();
                nodes.into_iter().for_each(|node| {
                    count(index.position(node.as_str()), node);
                });
                None
            }
        };
        if let Some(node) = over {
            let e = EngineError::NodeVisitLimitExceeded {
                node,
                limit: limits.max_node_visits,
            };
            return Planned::End(Ending::failed(e, None, Vec::new()));
        }
        cur.superstep += 1;
        cur.begun = true;
        Planned::Run(match single {
            Some(visit) => Few::One((0, visit)),
            None => todo(index, cur),
        })
    }

    /// Runs activations (each by its index in the vanguard) concurrently,
    /// at most `max_concurrency` at once, against one snapshot. In a
    /// superstep of mustered tasks, finished tasks go straight into
    /// `cur.completed`, and progress waypoints listing them are written as
    /// they finish (at most about 16 per superstep), so a crash or halt
    /// re-runs only the rest; every other result is returned. `solo` is
    /// the node of a vanguard of one (see `drive`).
    async fn run_vanguard(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        run_budget: &RunBudget,
        todo: Few<(usize, u32)>,
        solo: Option<NodeEntry<'_>>,
    ) -> Result<Few<(usize, ActivationResult)>, EngineError> {
        let limits = &index.graph.limits;
        // A Battalion child's attempts get no more grace than its parent's.
        let shutdown_grace = self
            .kit
            .grace_cap
            .map_or(limits.shutdown_grace, |cap| cap.min(limits.shutdown_grace));

        // One activation (every superstep of a chain) needs no stream, and
        // reads the cursor in place.
        if let Few::One(only) = todo {
            let env = StepEnv::new(&cur.step, cur.superstep, index, run_budget, shutdown_grace);
            return Ok(Few::One(self.activate(index, &env, only, solo).await));
        }
        // Several read a copy: the cursor takes progress waypoints meanwhile.
        let copy = cur.step.clone();
        let env = StepEnv::new(&copy, cur.superstep, index, run_budget, shutdown_grace);
        self.run_many(index, cur, &env, todo).await
    }

    /// Runs several activations, at most the graph's `max_concurrency` at
    /// once; returns what the barrier merges (a superstep with tasks keeps
    /// its finished activations in the cursor instead, see [`Progress`]).
    async fn run_many(
        &self,
        index: &GraphIndex<'_>,
        cur: &mut Cursor,
        env: &StepEnv<'_>,
        todo: Few<(usize, u32)>,
    ) -> Result<Few<(usize, ActivationResult)>, EngineError> {
        let mut progress = Progress::new(env, &todo, cur);
        let mut results = Few::default();
        let limit = index.graph.limits.max_concurrency.max(1);
        let mut running = FuturesUnordered::new();
        let mut todo = todo.into_iter();
        // The box of the last activation that finished inline, reused for
        // the next: an activation's future is large, and a muster would
        // otherwise allocate and free one per task.
        let mut spare = None;
        loop {
            // Start activations while there is room. One that finishes on
            // its first poll (most do) never enters the set, whose
            // bookkeeping costs more than the activation itself; the others
            // run concurrently there, at most `limit` at once.
            let (i, result) = if running.len() < limit
                && let Some(next) = todo.next()
            {
                let mut activation = match spare.take() {
                    Some(mut reused) => {
                        Pin::set(&mut reused, self.activate(index, env, next, None));
                        reused
                    }
                    None => Box::pin(self.activate(index, env, next, None)),
                };
                match std::future::poll_fn(|cx| Poll::Ready(activation.as_mut().poll(cx))).await {
                    Poll::Ready(done) => {
                        spare = Some(activation);
                        // Finishing inline never yields: give the runtime
                        // its turn once this task's budget is spent.
                        tokio::task::consume_budget().await;
                        done
                    }
                    Poll::Pending => {
                        running.push(activation);
                        continue;
                    }
                }
            } else {
                match running.next().await {
                    Some(done) => done,
                    None => break,
                }
            };
            match (result, progress.kept(env, i)) {
                (
                    ActivationResult::Done {
                        directive,
                        record,
                        handled,
                    },
                    Some(activation),
                ) => {
                    let done = CompletedActivation {
                        activation: activation.clone(),
                        directive,
                        record,
                        handled,
                    };
                    if progress.keep(cur, done) {
                        self.write(cur, WaypointStatus::Running, Few::Zero).await?;
                    }
                }
                (other, _) => results.push((i, other)),
            }
        }
        Ok(results)
    }

    /// Runs the vanguard's activation `i` (at its node's visit `visit`);
    /// `entry` is its node, when the caller looked it up.
    async fn activate(
        &self,
        index: &GraphIndex<'_>,
        env: &StepEnv<'_>,
        (i, visit): (usize, u32),
        entry: Option<NodeEntry<'_>>,
    ) -> (usize, ActivationResult) {
        // `todo` indexes this very vanguard.
        let Some(activation) = env.step.vanguard.get(i) else {
            return (i, ActivationResult::undeclared(&NodeId::new("?")));
        };
        let Some(entry) = entry.or_else(|| index.node(activation.node_id.as_str())) else {
            // Only a waypoint store returning another graph's vanguard
            // could get here; fail the activation, not the process.
            return (i, ActivationResult::undeclared(&activation.node_id));
        };
        let parley_response = env
            .step
            .parley
            .as_deref()
            .filter(|p| p.nodes.contains(&activation.node_id))
            .map(|p| &p.response);
        let act = ActivationCtx {
            thread_id: &env.step.thread_id,
            superstep: env.superstep,
            run_budget: env.run_budget,
            spec: entry.spec,
            aegis: entry.aegis.unwrap_or(&NO_POLICIES),
            fingerprint: &env.step.fingerprint,
            // A node-scoped seed holds no fingerprint: it always fits.
            cache_seed: entry
                .cache_seed
                .filter(|seed| env.seeds_fit || !seed.scope().is_graph()),
            schema: &index.graph.schema,
            task: activation.task.as_ref(),
            task_ref: activation
                .task
                .as_ref()
                .and(env.tasks.as_ref())
                .map(|tasks| TaskRef::new(tasks.clone(), i)),
            parley_response,
            visit,
            shutdown_grace: env.shutdown_grace,
            battalions: self,
        };
        // Awaited where it is built on either path: the activation's
        // result moves out of one future, not through a span wrapper's too.
        let span = node_span(&act, activation);
        if span.is_disabled() {
            return (
                i,
                self.kit
                    .run_activation(&act, &env.step.state, activation)
                    .await,
            );
        }
        let result = {
            let run = std::pin::pin!(self.kit.run_activation(&act, &env.step.state, activation));
            run.instrument(span.clone()).await
        };
        node_span_ended(&span, &result);
        (i, result)
    }
}
