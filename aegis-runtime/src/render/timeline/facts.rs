//! What the trace adds to the waypoints: the exact backoff before an
//! attempt, and the fallback hops reported while an attempt ran.

use std::collections::HashMap;
use std::time::Duration;

use crate::id::NodeId;
use crate::trace::TraceEvent;

/// A fallback hop: the chain moved from one provider to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hop {
    pub(super) from: String,
    pub(super) to: String,
}

/// Key of an attempt in the trace: node, task, attempt, superstep.
type AttemptKey = (NodeId, Option<String>, u32, u32);

/// What the trace adds: backoff delays by the attempt about to run (its
/// task unset for a node's own retry) and hops by attempt.
#[derive(Default)]
pub(super) struct TraceFacts {
    delays: HashMap<AttemptKey, Option<Duration>>,
    hops: HashMap<AttemptKey, Vec<Hop>>,
    /// The attempts started and not yet finished, in the order they started.
    open: Vec<AttemptKey>,
}

impl TraceFacts {
    /// The facts of `thread`'s events in `trace` (a hop names no thread: it
    /// belongs to the attempt running when it was reported).
    pub(super) fn read(thread: &str, trace: &[TraceEvent]) -> Self {
        let mut facts = TraceFacts::default();
        for event in trace {
            match event {
                TraceEvent::NodeStarted {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                } if thread_id == thread => {
                    let key = (node_id.clone(), task_key.clone(), *attempt, *superstep);
                    facts.open.push(key);
                }
                TraceEvent::NodeFinished {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    ..
                } if thread_id == thread => {
                    let key = (node_id.clone(), task_key.clone(), *attempt, *superstep);
                    facts.open.retain(|k| *k != key);
                }
                TraceEvent::TaskRetryScheduled {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    delay,
                } if thread_id == thread => {
                    let key = (
                        node_id.clone(),
                        Some(task_key.clone()),
                        *attempt,
                        *superstep,
                    );
                    facts.delays.insert(key, Some(*delay));
                }
                TraceEvent::RetryScheduled {
                    thread_id,
                    superstep,
                    node_id,
                    attempt,
                    delay,
                } if thread_id == thread => {
                    facts.node_retry((node_id.clone(), None, *attempt, *superstep), *delay);
                }
                TraceEvent::FallbackHop {
                    node_id,
                    from_provider,
                    to_provider,
                } => facts.hop(node_id.as_ref(), from_provider, to_provider),
                _ => {}
            }
        }
        facts
    }

    /// A retry scheduled by an event that names no task (a trace of an
    /// older version retried tasks with it): tasks that waited differently
    /// leave the wait unknown (the wall clock's).
    fn node_retry(&mut self, key: AttemptKey, delay: Duration) {
        self.delays
            .entry(key)
            .and_modify(|d| {
                if *d != Some(delay) {
                    *d = None;
                }
            })
            .or_insert(Some(delay));
    }

    /// A hop goes on the attempt running when it was reported: its node's
    /// latest, when the event names the node, else the latest of any.
    fn hop(&mut self, node: Option<&NodeId>, from: &str, to: &str) {
        let running = match node {
            Some(n) => self.open.iter().rev().find(|k| k.0 == *n),
            None => self.open.last(),
        };
        if let Some(key) = running {
            self.hops.entry(key.clone()).or_default().push(Hop {
                from: from.to_string(),
                to: to.to_string(),
            });
        }
    }

    /// The traced wait before `attempt` of `node`'s `task` in `superstep`:
    /// the task's own, else its node's; `None` when not traced or unknown.
    pub(super) fn delay_before(
        &self,
        node: &NodeId,
        task: &Option<String>,
        attempt: u32,
        superstep: u32,
    ) -> Option<Duration> {
        let task = (node.clone(), task.clone(), attempt, superstep);
        let node = (node.clone(), None, attempt, superstep);
        self.delays
            .get(&task)
            .or_else(|| self.delays.get(&node))
            .copied()
            .flatten()
    }

    /// The hops traced during that attempt, `None` when the trace has none.
    pub(super) fn hops_in(
        &self,
        node: &NodeId,
        task: &Option<String>,
        attempt: u32,
        superstep: u32,
    ) -> Option<&Vec<Hop>> {
        self.hops
            .get(&(node.clone(), task.clone(), attempt, superstep))
    }
}
