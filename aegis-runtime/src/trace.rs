//! Typed trace events, the sinks that receive them, and the bridge to
//! `tracing`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::graph::EffectOutcome;
use crate::id::NodeId;

mod activation;
pub(crate) mod ambient;
mod cache_origin;
#[cfg(feature = "metrics")]
pub(crate) mod observe;
#[cfg(feature = "otel")]
pub mod otel;

use activation::Activation;
pub use cache_origin::CacheOrigin;

/// How one attempt (or one cache hit) ended, as `NodeFinished` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum AttemptStatus {
    /// The attempt produced a directive.
    Succeeded,
    /// The attempt failed with this error.
    Failed(crate::error::NodeError),
    /// The attempt was abandoned (shutdown) or skipped by an interceptor.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// The deadline a skipped retry would have overrun
/// ([`TraceEvent::RetrySkipped`], `RetrySkip` on the node's record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetBound {
    /// The run budget: `EngineLimits::run_timeout` of this `start`/`resume`.
    RunBudget,
    /// An enclosing deadline: for a node of a Battalion's child graph, when
    /// the parent's Battalion attempt is cut (its run timeout, or the
    /// parent's own budget).
    EnclosingDeadline,
}

impl fmt::Display for BudgetBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetBound::RunBudget => "run budget",
            BudgetBound::EnclosingDeadline => "enclosing deadline",
        })
    }
}

/// Something that happened in a run. Sinks get these synchronously.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub enum TraceEvent {
    /// A start or resume call began driving a thread.
    RunStarted {
        /// The thread.
        thread_id: String,
        /// Whether this is a resume.
        resumed: bool,
    },
    /// A superstep began.
    SuperstepStarted {
        /// The thread.
        thread_id: String,
        /// The superstep's number (1-based).
        superstep: u32,
        /// The activations due, in vanguard order.
        vanguard: Vec<NodeId>,
    },
    /// An attempt of a node began.
    NodeStarted {
        /// The thread (a Battalion child's attempts carry the child thread).
        thread_id: String,
        /// The superstep of the attempt, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt, 1-based.
        attempt: u32,
    },
    /// An attempt of a node ended (or a cache hit was served).
    NodeFinished {
        /// The thread (a Battalion child's attempts carry the child thread).
        thread_id: String,
        /// The superstep of the attempt, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt, 1-based.
        attempt: u32,
        /// How it ended.
        status: AttemptStatus,
        /// Whether the result came from the node cache.
        cache_hit: bool,
        /// On a cache hit, who produced the served entry (`None` otherwise,
        /// and for an entry stored before entries recorded it). Boxed: it
        /// is rare, and every event would otherwise carry its size.
        cache_origin: Option<Box<CacheOrigin>>,
        /// How long the attempt took.
        duration: Duration,
    },
    /// A failed attempt will be retried after `delay` (a mustered task's:
    /// [`TraceEvent::TaskRetryScheduled`], which names the task).
    RetryScheduled {
        /// The thread (a Battalion child's attempts carry the child thread).
        thread_id: String,
        /// The superstep of the attempt, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The attempt about to run.
        attempt: u32,
        /// The wait before it, jitter included.
        delay: Duration,
    },
    /// A retry was not scheduled: its wait would end at or after the run
    /// budget or an enclosing deadline, so the node fails at once with its
    /// last error (and its `on_error` handler runs, in the time left).
    RetrySkipped {
        /// The thread (a Battalion child's attempts carry the child thread).
        thread_id: String,
        /// The superstep of the attempt, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt that will not run.
        attempt: u32,
        /// The wait it would have needed (backoff, jitter and any
        /// `Retry-After` floor included).
        wait: Duration,
        /// The time left before the deadline.
        remaining: Duration,
        /// Which deadline.
        bound: BudgetBound,
    },
    /// A fallback chain moved from one provider to the next.
    FallbackHop {
        /// The node, when known.
        node_id: Option<NodeId>,
        /// The provider that failed.
        from_provider: String,
        /// The provider tried next.
        to_provider: String,
    },
    /// A node's `on_error` handler took over its final failure; its
    /// directive takes the node's place.
    HandlerRan {
        /// The thread (a Battalion child's nodes carry the child thread).
        thread_id: String,
        /// The superstep of the failure, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The handler's kind: `route`, `absorb` or `custom`.
        handler: &'static str,
    },
    /// A node asked a human (a Gate, or a node returning a parley); the run
    /// stops `AwaitingInput` at this superstep's barrier.
    ParleyRaised {
        /// The thread.
        thread_id: String,
        /// The superstep that raised it.
        superstep: u32,
        /// The node waiting for the answer.
        node_id: NodeId,
        /// The question.
        prompt: String,
    },
    /// A superstep's barrier was written.
    SuperstepFinished {
        /// The thread.
        thread_id: String,
        /// The superstep's number.
        superstep: u32,
        /// The activations of the next superstep.
        next: Vec<NodeId>,
    },
    /// A start or resume call ended.
    RunFinished {
        /// The thread.
        thread_id: String,
        /// `Completed`, `Failed`, `Halted` or `AwaitingInput`.
        outcome: &'static str,
    },
    /// A mustered task's failed attempt will be retried after `delay`: what
    /// [`TraceEvent::RetryScheduled`] says of a node's own activation, with
    /// the task it retries.
    #[non_exhaustive]
    TaskRetryScheduled {
        /// The thread (a Battalion child's attempts carry the child thread).
        thread_id: String,
        /// The superstep of the attempt, in that thread.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key.
        task_key: String,
        /// The attempt about to run.
        attempt: u32,
        /// The wait before it, jitter included.
        delay: Duration,
    },
    /// A retry or a fallback hop was not sent: its expected spend would
    /// pass what is left of the budget, the provider is too dear next to
    /// the primary, or the request cannot fit the provider's context
    /// window. The run fields are `None` when a fallback chain reports it
    /// to its own sinks (the engine reports it again with them set).
    StepSkipped {
        /// The thread, when known.
        thread_id: Option<String>,
        /// The superstep, when known.
        superstep: Option<u32>,
        /// The node, when known.
        node_id: Option<NodeId>,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// What was skipped and why.
        skip: crate::policy::Skip,
    },
    /// What one attempt of a Paladin node spent, failed and abandoned
    /// attempts included.
    AttemptSpend {
        /// The thread.
        thread_id: String,
        /// The superstep.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt.
        attempt: u32,
        /// Its tokens and cost.
        spend: crate::policy::Spend,
    },
    /// What the whole `start`/`resume` call spent, just before
    /// [`TraceEvent::RunFinished`].
    RunSpend {
        /// The thread.
        thread_id: String,
        /// Its tokens and cost.
        spend: crate::policy::Spend,
        /// What was left of its budget, when it had one.
        remaining: Option<crate::policy::Remaining>,
    },
    /// What became of one of a node's effects
    /// ([`NodeContext::effect`](crate::graph::NodeContext::effect)) in one
    /// attempt, emitted when its activation ends (in the order they
    /// happened). An [`EffectOutcome::Unknown`] is an unknown outcome, with
    /// its key; what its policy did follows.
    Effect {
        /// The thread.
        thread_id: String,
        /// The superstep.
        superstep: u32,
        /// The node.
        node_id: NodeId,
        /// The task key, for a mustered task.
        task_key: Option<String>,
        /// The attempt.
        attempt: u32,
        /// The effect's name.
        effect: String,
        /// Its idempotency key.
        key: String,
        /// What became of it.
        outcome: EffectOutcome,
    },
}

/// Receives trace events. `emit` is called synchronously on the engine's task
/// and must not block.
pub trait TraceSink: Send + Sync + 'static {
    /// Receives one event.
    fn emit(&self, event: TraceEvent);
}

/// A closure is a sink: `Arc::new(|event: TraceEvent| println!("{event}"))`.
impl<F> TraceSink for F
where
    F: Fn(TraceEvent) + Send + Sync + 'static,
{
    fn emit(&self, event: TraceEvent) {
        self(event);
    }
}

impl fmt::Display for AttemptStatus {
    /// `succeeded`, `failed ({transience}): {source}` or `skipped: {reason}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptStatus::Succeeded => f.write_str("succeeded"),
            AttemptStatus::Failed(error) => {
                write!(f, "failed ({}): {}", error.transience, error.source)
            }
            AttemptStatus::Skipped { reason } => write!(f, "skipped: {reason}"),
        }
    }
}

/// `a, b`, or `(none)` for an empty list.
struct NodeList<'a>(&'a [NodeId]);

impl fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(none)");
        }
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{id}")?;
        }
        Ok(())
    }
}

impl fmt::Display for TraceEvent {
    /// One line per event, prefixed by its thread, for printing a trace as
    /// it happens: `[trip-1] superstep 2: book attempt 1 failed after 3ms
    /// (transient): seat map returned 503`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceEvent::RunStarted { thread_id, resumed } => {
                let verb = if *resumed { "resumed" } else { "started" };
                write!(f, "[{thread_id}] run {verb}")
            }
            TraceEvent::SuperstepStarted {
                thread_id,
                superstep,
                vanguard,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep} runs {}",
                NodeList(vanguard)
            ),
            TraceEvent::NodeStarted {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {} attempt {attempt} started",
                Activation(node_id, task_key)
            ),
            TraceEvent::NodeFinished {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
                status,
                cache_hit,
                cache_origin,
                duration,
            } => {
                let activation = Activation(node_id, task_key);
                write!(f, "[{thread_id}] superstep {superstep}: {activation} ")?;
                if *cache_hit {
                    write!(f, "served from the cache in {duration:?}")?;
                    if let Some(origin) = cache_origin {
                        write!(f, " (stored by {origin})")?;
                    }
                    return Ok(());
                }
                match status {
                    AttemptStatus::Succeeded => {
                        write!(f, "attempt {attempt} succeeded in {duration:?}")
                    }
                    AttemptStatus::Failed(error) => write!(
                        f,
                        "attempt {attempt} failed after {duration:?} ({}): {}",
                        error.transience, error.source
                    ),
                    AttemptStatus::Skipped { reason } => {
                        write!(f, "attempt {attempt} skipped after {duration:?}: {reason}")
                    }
                }
            }
            TraceEvent::RetryScheduled {
                thread_id,
                superstep,
                node_id,
                attempt,
                delay,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {node_id} retries, attempt {attempt} in {delay:?}"
            ),
            TraceEvent::TaskRetryScheduled {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
                delay,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {node_id}[{task_key}] retries, attempt {attempt} in {delay:?}"
            ),
            TraceEvent::RetrySkipped {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
                wait,
                remaining,
                bound,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {} does not retry: attempt {attempt} would wait {wait:?}, {remaining:?} left of the {bound}",
                Activation(node_id, task_key)
            ),
            TraceEvent::FallbackHop {
                node_id,
                from_provider,
                to_provider,
            } => {
                if let Some(node_id) = node_id {
                    write!(f, "{node_id}: ")?;
                }
                write!(f, "model fallback from {from_provider} to {to_provider}")
            }
            TraceEvent::StepSkipped {
                thread_id,
                superstep,
                node_id,
                task_key,
                skip,
            } => {
                if let Some(thread_id) = thread_id {
                    write!(f, "[{thread_id}] ")?;
                }
                if let Some(superstep) = superstep {
                    write!(f, "superstep {superstep}: ")?;
                }
                if let Some(node_id) = node_id {
                    write!(f, "{}: ", Activation(node_id, task_key))?;
                }
                write!(f, "{skip}")
            }
            TraceEvent::AttemptSpend {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
                spend,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {} attempt {attempt} spent {spend}",
                Activation(node_id, task_key)
            ),
            TraceEvent::RunSpend {
                thread_id,
                spend,
                remaining,
            } => {
                write!(f, "[{thread_id}] run spent {spend}")?;
                match remaining {
                    Some(r) => write!(f, "; {r} of its budget"),
                    None => Ok(()),
                }
            }
            TraceEvent::HandlerRan {
                thread_id,
                superstep,
                node_id,
                task_key,
                handler,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {} failed, handled by its {handler} handler",
                Activation(node_id, task_key)
            ),
            TraceEvent::Effect {
                thread_id,
                superstep,
                node_id,
                task_key,
                attempt,
                effect,
                key,
                outcome,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {} attempt {attempt}: effect {effect} ({key}) {}",
                Activation(node_id, task_key),
                outcome.name()
            ),
            TraceEvent::ParleyRaised {
                thread_id,
                superstep,
                node_id,
                prompt,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep}: {node_id} asks: {prompt}"
            ),
            TraceEvent::SuperstepFinished {
                thread_id,
                superstep,
                next,
            } => write!(
                f,
                "[{thread_id}] superstep {superstep} done, next: {}",
                NodeList(next)
            ),
            TraceEvent::RunFinished { thread_id, outcome } => {
                write!(f, "[{thread_id}] run finished: {outcome}")
            }
        }
    }
}

/// A sink that keeps every event, for tests and examples.
#[derive(Debug, Default)]
pub struct CollectingTraceSink {
    events: Mutex<Vec<TraceEvent>>,
}

impl CollectingTraceSink {
    /// An empty sink.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<TraceEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Forgets every event so far.
    pub fn clear(&self) {
        if let Ok(mut e) = self.events.lock() {
            e.clear();
        }
    }
}

impl TraceSink for CollectingTraceSink {
    fn emit(&self, event: TraceEvent) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event);
        }
    }
}

/// Mirrors an event to `tracing`, so any subscriber sees the same facts.
pub(crate) fn log_event(event: &TraceEvent) {
    match event {
        TraceEvent::RunStarted { thread_id, resumed } => {
            tracing::info!(thread_id, resumed, "run started");
        }
        TraceEvent::SuperstepStarted {
            superstep,
            vanguard,
            ..
        } => {
            tracing::debug!(superstep, vanguard = ?vanguard, "superstep started");
        }
        TraceEvent::NodeStarted {
            thread_id,
            node_id,
            task_key,
            attempt,
            ..
        } => {
            tracing::debug!(thread_id, node_id = %node_id, task_key, attempt, "attempt started");
        }
        TraceEvent::NodeFinished {
            thread_id,
            node_id,
            task_key,
            attempt,
            status,
            cache_hit,
            duration,
            ..
        } => match status {
            AttemptStatus::Failed(e) => {
                tracing::warn!(thread_id, node_id = %node_id, task_key, attempt, error = %e, ?duration, "attempt failed");
            }
            _ => {
                tracing::debug!(thread_id, node_id = %node_id, task_key, attempt, cache_hit, ?duration, status = ?status, "attempt finished");
            }
        },
        TraceEvent::RetryScheduled {
            thread_id,
            node_id,
            attempt,
            delay,
            ..
        } => {
            tracing::info!(thread_id, node_id = %node_id, attempt, ?delay, "retry scheduled");
        }
        TraceEvent::TaskRetryScheduled {
            thread_id,
            node_id,
            task_key,
            attempt,
            delay,
            ..
        } => {
            tracing::info!(thread_id, node_id = %node_id, task_key, attempt, ?delay, "retry scheduled");
        }
        TraceEvent::RetrySkipped {
            thread_id,
            node_id,
            task_key,
            attempt,
            wait,
            remaining,
            bound,
            ..
        } => {
            tracing::warn!(thread_id, node_id = %node_id, task_key, attempt, ?wait, ?remaining,
                bound = %bound, "retry skipped: its wait would overrun the deadline");
        }
        TraceEvent::FallbackHop {
            from_provider,
            to_provider,
            ..
        } => {
            tracing::warn!(from_provider, to_provider, "model fallback hop");
        }
        TraceEvent::StepSkipped {
            thread_id,
            node_id,
            skip,
            ..
        } => {
            tracing::warn!(thread_id, node_id = ?node_id, skip = %skip, "step skipped");
        }
        TraceEvent::AttemptSpend {
            thread_id,
            node_id,
            attempt,
            spend,
            ..
        } => {
            tracing::debug!(thread_id, node_id = %node_id, attempt, spend = %spend, "attempt spend");
        }
        TraceEvent::RunSpend {
            thread_id, spend, ..
        } => {
            tracing::info!(thread_id, spend = %spend, "run spend");
        }
        TraceEvent::HandlerRan {
            thread_id,
            node_id,
            task_key,
            handler,
            ..
        } => {
            tracing::debug!(thread_id, node_id = %node_id, task_key, handler, "handler ran");
        }
        TraceEvent::Effect {
            thread_id,
            node_id,
            task_key,
            attempt,
            effect,
            key,
            outcome,
            ..
        } => {
            // The unknown outcome itself was logged (`warn`) as it was found.
            tracing::debug!(thread_id, node_id = %node_id, task_key, attempt, effect, effect_key = key, outcome = outcome.name(), "effect");
        }
        TraceEvent::ParleyRaised {
            thread_id, node_id, ..
        } => {
            tracing::info!(thread_id, node_id = %node_id, "parley raised");
        }
        TraceEvent::SuperstepFinished {
            superstep, next, ..
        } => {
            tracing::debug!(superstep, next = ?next, "superstep finished");
        }
        TraceEvent::RunFinished { thread_id, outcome } => {
            tracing::info!(thread_id, outcome, "run finished");
        }
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(TraceSink);
