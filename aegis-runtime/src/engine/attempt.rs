//! The attempt loop of one activation: (interceptors → attempt under its
//! timeouts) × retries, with backoff waits that race cancellation and the
//! run budget.

use futures::FutureExt;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tracing::Instrument;

use super::{
    HeartbeatHandle, InterceptorDecision, NodeContext, NodeExecutionRecord, NodeStatus, WarEngine,
    record::AttemptRecord,
};
use crate::aegis::{CachePolicy, ErrorHandlerSpec, RetryPolicy, RetryPredicate, TimeoutPolicy};
use crate::cache::{CacheKey, derive_key};
use crate::error::{NodeError, NodeErrorSource, PaladinError, TimeoutKind, Transience};
use crate::graph::{
    Directive, MusterTask, NextStep, NodeId, NodeSpec, ParleyRequest, ParleyResponse,
};
use crate::paladin::parse_and_check;
use crate::state::{Battlefield, BattlefieldSchema, StateDelta};
use crate::trace::{AttemptStatus, TraceEvent};
use crate::waypoint::{Activation, WaypointStore};

/// The run budget of one `start`/`resume` call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) started: Instant,
    pub(crate) limit: Option<Duration>,
}

impl Budget {
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        Budget {
            started: Instant::now(),
            limit,
        }
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.limit.map(|l| self.started + l)
    }

    pub(crate) fn exceeded(&self) -> Option<crate::error::EngineError> {
        let limit = self.limit?;
        let elapsed = self.started.elapsed();
        (elapsed >= limit)
            .then_some(crate::error::EngineError::RunTimeoutExceeded { elapsed, limit })
    }

    pub(crate) fn error(&self) -> crate::error::EngineError {
        crate::error::EngineError::RunTimeoutExceeded {
            elapsed: self.started.elapsed(),
            limit: self.limit.unwrap_or_default(),
        }
    }
}

/// What the run loop needs to know about one superstep.
pub(crate) struct StepCtx<'a> {
    pub(crate) thread_id: &'a Arc<str>,
    pub(crate) superstep: u32,
    pub(crate) budget: Budget,
    pub(crate) spec: &'a NodeSpec,
    pub(crate) fingerprint: &'a str,
    pub(crate) schema: &'a BattlefieldSchema,
    pub(crate) cache: Option<&'a CachePolicy>,
    pub(crate) retry: Option<&'a RetryPolicy>,
    pub(crate) on_error: Option<&'a ErrorHandlerSpec>,
    pub(crate) task: Option<&'a MusterTask>,
    pub(crate) parley_response: Option<&'a ParleyResponse>,
    /// How often this node has been activated in the thread (1 = first).
    pub(crate) visit: u32,
    pub(crate) timeout: Option<&'a TimeoutPolicy>,
    pub(crate) shutdown_grace: Duration,
}

/// How one activation ended.
pub(crate) enum ActivationResult {
    /// Contributes a directive: the node's own success, or, after a final
    /// failure, what its error handler decided (the record then reads Failed).
    Done {
        directive: Directive,
        record: NodeExecutionRecord,
    },
    Failed {
        error: NodeError,
        record: NodeExecutionRecord,
        /// The run budget ran out (an `EngineRun` cut, or during a backoff).
        budget_exhausted: bool,
    },
    /// Cancelled: re-listed in the Halted waypoint's vanguard.
    Shutdown { record: NodeExecutionRecord },
}

impl ActivationResult {
    pub(crate) fn undeclared(node_id: &NodeId) -> Self {
        let error = NodeError {
            node_id: node_id.clone(),
            attempt: 1,
            transience: Transience::Permanent,
            source: NodeErrorSource::Function {
                message: "the waypoint names a node this graph does not declare".to_string(),
            },
        };
        ActivationResult::Failed {
            record: NodeExecutionRecord {
                node_id: node_id.clone(),
                task_key: None,
                status: NodeStatus::Failed,
                attempt: 1,
                attempts: Vec::new(),
                cache_hit: false,
                started_at: SystemTime::now(),
                duration_ms: 0,
            },
            error,
            budget_exhausted: false,
        }
    }
}

enum AttemptEnd {
    Done(Directive),
    Error(NodeError),
    Shutdown,
}

enum Wait {
    Elapsed,
    Cancelled,
    BudgetGone,
}

async fn sleep_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn idle_opt(heartbeat: &HeartbeatHandle, idle: Option<Duration>) {
    match idle {
        Some(i) => heartbeat.idle_for(i).await,
        None => std::future::pending().await,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

/// A seeded attempt's jitter key: FNV-1a over its identity, so the same
/// attempt of the same thread always draws the same jitter (a std
/// `Hasher` is not promised to be stable across Rust releases).
fn jitter_key(seed: u64, step: &StepCtx<'_>, node_id: &NodeId, attempt: u32) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(PRIME);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h = (h ^ 0xff).wrapping_mul(PRIME);
    };
    eat(step.thread_id.as_bytes());
    eat(node_id.as_str().as_bytes());
    eat(step.task.map_or(&[][..], |t| t.task_key.as_bytes()));
    eat(&step.superstep.to_le_bytes());
    eat(&attempt.to_le_bytes());
    h
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<S: WaypointStore> WarEngine<S> {
    /// Runs one activation to its end: success, final failure or shutdown.
    pub(crate) async fn run_activation(
        &self,
        step: &StepCtx<'_>,
        state: &Battlefield,
        activation: &Activation,
    ) -> ActivationResult {
        let node_id = &activation.node_id;
        let span =
            tracing::debug_span!("aegis.node", node_id = %node_id, superstep = step.superstep);
        let result = self
            .attempt_loop(step, state, node_id)
            .instrument(span)
            .await;
        match (result, step.on_error) {
            // The handler runs on the final failure only; never when the run
            // budget is gone (there is no time left to compensate in).
            (
                ActivationResult::Failed {
                    error,
                    record,
                    budget_exhausted: false,
                },
                Some(handler),
            ) => self.handle_failure(handler, error, record, state).await,
            (other, _) => other,
        }
    }

    async fn attempt_loop(
        &self,
        step: &StepCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
    ) -> ActivationResult {
        let started_at = SystemTime::now();
        let t0 = Instant::now();
        let max_attempts = step.retry.map_or(1, |r| r.max_attempts.max(1));
        let mut failed: Vec<AttemptRecord> = Vec::new();
        let record = |status, attempt, failed: Vec<AttemptRecord>| NodeExecutionRecord {
            node_id: node_id.clone(),
            task_key: step.task.map(|t| t.task_key.clone()),
            status,
            attempt,
            attempts: failed,
            cache_hit: false,
            started_at,
            duration_ms: millis(t0.elapsed()),
        };
        let shutdown = |attempt, failed| ActivationResult::Shutdown {
            record: record(
                NodeStatus::Skipped {
                    reason: "shutdown".to_string(),
                },
                attempt,
                failed,
            ),
        };

        // The cache is consulted once, before attempt 1 and outside the
        // interceptor chain: a hit executes nothing.
        let cache_key = self.cache_key(step, state, node_id);
        if let (Some(key), Some(cache)) = (&cache_key, &self.node_cache)
            && let Some(entry) = cache.lookup(key).await.into_hit()
        {
            self.emit(TraceEvent::NodeFinished {
                thread_id: step.thread_id.to_string(),
                superstep: step.superstep,
                node_id: node_id.clone(),
                task_key: step.task.map(|t| t.task_key.clone()),
                attempt: 1,
                status: AttemptStatus::Succeeded,
                cache_hit: true,
                duration: t0.elapsed(),
            });
            let mut rec = record(NodeStatus::Succeeded, 1, failed);
            rec.cache_hit = true;
            return ActivationResult::Done {
                directive: Directive::edges(entry.delta),
                record: rec,
            };
        }

        let mut attempt = 1;
        loop {
            if self.cancellation.is_cancelled() {
                return shutdown(attempt, failed);
            }
            match self.before_hooks(node_id, state).await {
                InterceptorDecision::Continue => {}
                InterceptorDecision::Skip => {
                    return ActivationResult::Done {
                        directive: Directive::edges(StateDelta::new()),
                        record: record(
                            NodeStatus::Skipped {
                                reason: "interceptor".to_string(),
                            },
                            attempt,
                            failed,
                        ),
                    };
                }
                InterceptorDecision::Fail(message) => {
                    let error = NodeError {
                        node_id: node_id.clone(),
                        attempt,
                        transience: Transience::Permanent,
                        source: NodeErrorSource::Interceptor { message },
                    };
                    return ActivationResult::Failed {
                        error,
                        record: record(NodeStatus::Failed, attempt, failed),
                        budget_exhausted: false,
                    };
                }
            }

            self.emit(TraceEvent::NodeStarted {
                thread_id: step.thread_id.to_string(),
                superstep: step.superstep,
                node_id: node_id.clone(),
                task_key: step.task.map(|t| t.task_key.clone()),
                attempt,
            });
            let attempt_started = SystemTime::now();
            let a0 = Instant::now();
            let end = self.run_attempt(step, state, node_id, attempt).await;
            let duration = a0.elapsed();
            let status = match &end {
                AttemptEnd::Done(_) => AttemptStatus::Succeeded,
                AttemptEnd::Error(e) => AttemptStatus::Failed(e.clone()),
                AttemptEnd::Shutdown => AttemptStatus::Skipped {
                    reason: "shutdown".to_string(),
                },
            };
            self.emit(TraceEvent::NodeFinished {
                thread_id: step.thread_id.to_string(),
                superstep: step.superstep,
                node_id: node_id.clone(),
                task_key: step.task.map(|t| t.task_key.clone()),
                attempt,
                status,
                cache_hit: false,
                duration,
            });

            let error = match end {
                AttemptEnd::Done(directive) => {
                    return match self.after_hooks(node_id, &directive).await {
                        InterceptorDecision::Continue => {
                            // Only the node's own Edges-routed success is stored;
                            // the handle refuses any other directive.
                            if let (Some(key), Some(cache), Some(policy)) =
                                (&cache_key, &self.node_cache, step.cache)
                            {
                                cache.store(step.schema, key, &directive, policy.ttl).await;
                            }
                            ActivationResult::Done {
                                directive,
                                record: record(NodeStatus::Succeeded, attempt, failed),
                            }
                        }
                        InterceptorDecision::Skip => ActivationResult::Done {
                            directive: Directive::edges(StateDelta::new()),
                            record: record(
                                NodeStatus::Skipped {
                                    reason: "interceptor".to_string(),
                                },
                                attempt,
                                failed,
                            ),
                        },
                        InterceptorDecision::Fail(message) => ActivationResult::Failed {
                            error: NodeError {
                                node_id: node_id.clone(),
                                attempt,
                                transience: Transience::Permanent,
                                source: NodeErrorSource::Interceptor { message },
                            },
                            record: record(NodeStatus::Failed, attempt, failed),
                            budget_exhausted: false,
                        },
                    };
                }
                AttemptEnd::Shutdown => return shutdown(attempt, failed),
                AttemptEnd::Error(e) => e,
            };
            failed.push(AttemptRecord {
                attempt,
                started_at: attempt_started,
                duration_ms: millis(duration),
                error: error.clone(),
            });

            let budget_cut = error.source == NodeErrorSource::Timeout(TimeoutKind::EngineRun);
            let retry = match step.retry {
                Some(policy) if !budget_cut && attempt < max_attempts => self
                    .retry_allowed(policy, &error, attempt + 1)
                    .await
                    .then_some(policy),
                _ => None,
            };
            let Some(policy) = retry else {
                return ActivationResult::Failed {
                    error,
                    record: record(NodeStatus::Failed, attempt, failed),
                    budget_exhausted: budget_cut,
                };
            };

            // The RNG must not live across an await: it is not Send.
            let delay = match self.jitter_seed {
                Some(seed) => {
                    let key = jitter_key(seed, step, node_id, attempt + 1);
                    policy.delay_before(attempt + 1, &mut StdRng::seed_from_u64(key))
                }
                None => policy.delay_before(attempt + 1, &mut rand::rng()),
            };
            self.emit(TraceEvent::RetryScheduled {
                thread_id: step.thread_id.to_string(),
                superstep: step.superstep,
                node_id: node_id.clone(),
                attempt: attempt + 1,
                delay,
            });
            match self.backoff(delay, step.budget).await {
                Wait::Elapsed => attempt += 1,
                Wait::Cancelled => return shutdown(attempt + 1, failed),
                Wait::BudgetGone => {
                    return ActivationResult::Failed {
                        error,
                        record: record(NodeStatus::Failed, attempt, failed),
                        budget_exhausted: true,
                    };
                }
            }
        }
    }

    /// The node's cache key, when it has a cache policy and the engine a
    /// backend. A key that cannot be derived (an input that does not render)
    /// is a miss that is never stored.
    fn cache_key(
        &self,
        step: &StepCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
    ) -> Option<CacheKey> {
        let policy = step.cache?;
        self.node_cache.as_ref()?;
        match derive_key(
            step.fingerprint,
            node_id,
            step.spec,
            &policy.key,
            state,
            step.task.map(|t| (t.task_key.as_str(), &t.payload)),
        ) {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(node_id = %node_id, error = %e, "no cache key; running uncached");
                None
            }
        }
    }

    /// Whether `policy` retries `err` with attempt `next`.
    async fn retry_allowed(&self, policy: &RetryPolicy, err: &NodeError, next: u32) -> bool {
        if let Some(allowed) = policy.retry_on.allows_builtin(err.transience) {
            return allowed;
        }
        let RetryPredicate::Custom(name) = &policy.retry_on else {
            return false;
        };
        // Registration is checked at start/resume; a miss here cannot happen.
        let Some(predicate) = self.retry_predicates.get(name) else {
            return false;
        };
        match predicate.allows(err, next).await {
            Ok(allowed) => allowed,
            Err(e) => {
                tracing::warn!(predicate = %name, node_id = %err.node_id, error = %e,
                    "retry predicate failed; not retrying");
                false
            }
        }
    }

    /// Waits `delay` before the next attempt, racing cancellation and the run
    /// budget. A zero delay never touches the timer (a `sleep(0)` would wait
    /// for the next timer tick).
    async fn backoff(&self, delay: Duration, budget: Budget) -> Wait {
        if delay.is_zero() {
            return if self.cancellation.is_cancelled() {
                Wait::Cancelled
            } else {
                Wait::Elapsed
            };
        }
        let end = Instant::now() + delay;
        let (until, budget_first) = match budget.deadline() {
            Some(b) if b <= end => (b, true),
            _ => (end, false),
        };
        tokio::select! {
            biased;
            _ = self.cancellation.cancelled() => Wait::Cancelled,
            _ = tokio::time::sleep_until(until) => {
                if budget_first { Wait::BudgetGone } else { Wait::Elapsed }
            }
        }
    }

    async fn before_hooks(&self, node_id: &NodeId, state: &Battlefield) -> InterceptorDecision {
        for i in &self.interceptors {
            match i.before(node_id, state).await {
                InterceptorDecision::Continue => {}
                other => return other,
            }
        }
        InterceptorDecision::Continue
    }

    async fn after_hooks(&self, node_id: &NodeId, directive: &Directive) -> InterceptorDecision {
        for i in &self.interceptors {
            match i.after(node_id, directive).await {
                InterceptorDecision::Continue => {}
                other => return other,
            }
        }
        InterceptorDecision::Continue
    }

    /// One attempt under its bounds: the tightest of the run timeout and the
    /// run budget, the idle window, and cancellation (plus its grace).
    /// Dropping the attempt's future on expiry discards its partial work.
    async fn run_attempt(
        &self,
        step: &StepCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
        attempt: u32,
    ) -> AttemptEnd {
        let idle = step.timeout.and_then(|t| t.idle_timeout);
        let heartbeat = if idle.is_some() {
            HeartbeatHandle::tracking()
        } else {
            HeartbeatHandle::noop()
        };
        let ctx = NodeContext {
            node_id: node_id.clone(),
            thread_id: step.thread_id.clone(),
            superstep: step.superstep,
            attempt,
            heartbeat: heartbeat.clone(),
            cancellation: self.cancellation.clone(),
            parley_response: step.parley_response.cloned(),
            task: step.task.cloned(),
        };
        let now = Instant::now();
        let run_deadline = step
            .timeout
            .and_then(|t| t.run_timeout)
            .map(|d| (now + d, TimeoutKind::Run));
        // The budget wins ties: when both expire together the budget is gone.
        let hard = match (run_deadline, step.budget.deadline()) {
            (Some((r, k)), Some(b)) if r < b => Some((r, k)),
            (_, Some(b)) => Some((b, TimeoutKind::EngineRun)),
            (r, None) => r,
        };
        let timed_out = |kind| {
            AttemptEnd::Error(NodeError {
                node_id: node_id.clone(),
                attempt,
                transience: Transience::Transient,
                source: NodeErrorSource::Timeout(kind),
            })
        };
        let finish =
            |r: Result<Result<Directive, NodeError>, Box<dyn std::any::Any + Send>>| match r {
                Ok(Ok(d)) => AttemptEnd::Done(d),
                // A child run halted by the shared token: this attempt shuts down too.
                Ok(Err(e))
                    if e.source == NodeErrorSource::Cancelled
                        && self.cancellation.is_cancelled() =>
                {
                    AttemptEnd::Shutdown
                }
                Ok(Err(e)) => AttemptEnd::Error(e),
                Err(payload) => AttemptEnd::Error(NodeError {
                    node_id: node_id.clone(),
                    attempt,
                    transience: Transience::Unknown,
                    source: NodeErrorSource::Function {
                        message: format!("node panicked: {}", panic_message(&*payload)),
                    },
                }),
            };

        let fut = AssertUnwindSafe(self.execute(step, state, &ctx)).catch_unwind();
        tokio::pin!(fut);
        tokio::select! {
            biased;
            r = &mut fut => return finish(r),
            _ = sleep_opt(hard.map(|h| h.0)) => {
                return timed_out(hard.map_or(TimeoutKind::Run, |h| h.1));
            }
            _ = idle_opt(&heartbeat, idle) => return timed_out(TimeoutKind::Idle),
            _ = self.cancellation.cancelled() => {}
        }

        // Cancelled: the attempt may finish within the shutdown grace, still
        // under its own bounds (a stall past the idle window is no success).
        // A Battalion is not cut at the grace: its child already gives its
        // own attempts no more than this grace, then writes its Halted
        // waypoint; cutting it here would drop the child mid-write.
        let grace_end = match step.spec {
            NodeSpec::Battalion { .. } => None,
            _ => Some(Instant::now() + step.shutdown_grace),
        };
        let (until, kind) = match (hard, grace_end) {
            (Some((d, k)), Some(g)) if d < g => (Some(d), Some(k)),
            (_, Some(g)) => (Some(g), None),
            (Some((d, k)), None) => (Some(d), Some(k)),
            (None, None) => (None, None),
        };
        tokio::select! {
            biased;
            r = &mut fut => finish(r),
            _ = sleep_opt(until) => match kind {
                Some(k) => timed_out(k),
                None => AttemptEnd::Shutdown,
            },
            _ = idle_opt(&heartbeat, idle) => timed_out(TimeoutKind::Idle),
        }
    }

    /// Executes a node once.
    async fn execute(
        &self,
        step: &StepCtx<'_>,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, NodeError> {
        let fail = |transience, source| NodeError {
            node_id: ctx.node_id.clone(),
            attempt: ctx.attempt,
            transience,
            source,
        };
        match step.spec {
            NodeSpec::Function(node) => node.run(state, ctx).await.map_err(|e| {
                fail(
                    e.transience,
                    NodeErrorSource::Function { message: e.message },
                )
            }),
            NodeSpec::Paladin {
                paladin,
                input,
                output_field,
                output_schema,
            } => {
                let paladin_error =
                    |e: PaladinError| fail(e.transience(), NodeErrorSource::from(&e));
                let prompt = input
                    .render(state)
                    .map_err(|e| paladin_error(PaladinError::ConfigurationError(e.to_string())))?;
                let result = self
                    .paladin_port
                    .execute_observed(paladin, &prompt, &ctx.heartbeat)
                    .await
                    .map_err(paladin_error)?;
                let value = match output_schema {
                    None => serde_json::Value::String(result.output),
                    Some(schema) => parse_and_check(&result.output, schema)
                        .map_err(|m| paladin_error(PaladinError::OutputSchemaViolation(m)))?,
                };
                let mut delta = StateDelta::new();
                delta
                    .set(output_field, value)
                    .map_err(|e| paladin_error(PaladinError::ConfigurationError(e.to_string())))?;
                Ok(Directive::edges(delta))
            }
            NodeSpec::Gate {
                prompt,
                expires_after,
                on_expire,
                approve,
                reject,
            } => Ok(match &ctx.parley_response {
                None => Directive::parley(ParleyRequest {
                    prompt: prompt.clone(),
                    payload: serde_json::Value::Null,
                    expires_after: *expires_after,
                    on_expire: on_expire.clone(),
                }),
                Some(answer) => {
                    let target = if answer.is_approval() {
                        approve
                    } else {
                        reject
                    };
                    Directive::goto(StateDelta::new(), target.clone())
                }
            }),
            NodeSpec::Battalion {
                child,
                inputs,
                outputs,
            } => {
                // Boxed: a child run is an engine run, so the future recurses.
                Box::pin(self.run_battalion(child, inputs, outputs, state, ctx, step)).await
            }
        }
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// Applies a node's `on_error` to its final failure.
    async fn handle_failure(
        &self,
        handler: &ErrorHandlerSpec,
        error: NodeError,
        record: NodeExecutionRecord,
        state: &Battlefield,
    ) -> ActivationResult {
        let unhandled = |error| ActivationResult::Failed {
            error,
            record: record.clone(),
            budget_exhausted: false,
        };
        let directive = match handler {
            ErrorHandlerSpec::Route { to, error_field } => {
                let mut delta = StateDelta::new();
                if let Err(e) = delta.set(error_field, &error) {
                    tracing::error!(node_id = %error.node_id, error = %e,
                        "could not serialise the node error for its route");
                    return unhandled(error);
                }
                Directive {
                    delta,
                    next: NextStep::Goto(to.clone()),
                }
            }
            ErrorHandlerSpec::Absorb { fallback_delta } => Directive::edges(fallback_delta.clone()),
            ErrorHandlerSpec::Custom(name) => {
                // Registration is checked at start/resume.
                let Some(custom) = self.error_handlers.get(name) else {
                    return unhandled(error);
                };
                match custom.handle(&error, state).await {
                    Ok(directive) => directive,
                    Err(handler_error) => {
                        tracing::warn!(handler = %name, node_id = %error.node_id,
                            error = %handler_error, "error handler failed");
                        return unhandled(handler_error);
                    }
                }
            }
        };
        tracing::info!(node_id = %error.node_id, handler = handler.kind(), "error handled");
        ActivationResult::Done { directive, record }
    }
}
