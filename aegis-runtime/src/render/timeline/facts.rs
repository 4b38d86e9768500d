//! What the trace adds to the waypoints: the exact backoff before an
//! attempt, and the fallback hops reported while an attempt ran.

use std::collections::HashMap;
use std::time::Duration;

use crate::id::NodeId;
use crate::trace::TraceEvent;

/// Key of an attempt in the trace: node, task, attempt, superstep.
pub(super) type AttemptKey = (NodeId, Option<String>, u32, u32);

/// What the trace adds: backoff delays by the attempt about to run (its
/// task unset for a node's own retry) and hops by attempt.
#[derive(Default)]
pub(super) struct TraceFacts {
    pub(super) delays: HashMap<AttemptKey, Option<Duration>>,
    pub(super) hops: HashMap<AttemptKey, Vec<(String, String)>>,
}

impl TraceFacts {
    pub(super) fn read(thread: &str, trace: &[TraceEvent]) -> Self {
        let mut facts = TraceFacts::default();
        let mut open: Vec<AttemptKey> = Vec::new();
        for event in trace {
            match event {
                TraceEvent::NodeStarted {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                } if thread_id == thread => {
                    open.push((node_id.clone(), task_key.clone(), *attempt, *superstep));
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
                    open.retain(|k| *k != key);
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
                    // The event names no task (a trace of an older version
                    // retried tasks with it): tasks that waited differently
                    // leave the wait unknown (the wall clock's).
                    facts
                        .delays
                        .entry((node_id.clone(), None, *attempt, *superstep))
                        .and_modify(|d| {
                            if *d != Some(*delay) {
                                *d = None;
                            }
                        })
                        .or_insert(Some(*delay));
                }
                TraceEvent::FallbackHop {
                    node_id,
                    from_provider,
                    to_provider,
                } => {
                    let running = match node_id {
                        Some(n) => open.iter().rev().find(|k| k.0 == *n),
                        None => open.last(),
                    };
                    if let Some(key) = running {
                        facts
                            .hops
                            .entry(key.clone())
                            .or_default()
                            .push((from_provider.clone(), to_provider.clone()));
                    }
                }
                _ => {}
            }
        }
        facts
    }
}
