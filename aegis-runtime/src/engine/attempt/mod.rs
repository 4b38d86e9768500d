//! One activation of a node, in the guide's order: the cache is consulted
//! once; on a miss, attempts run under their timeouts, failed ones retried
//! with backoff; a success is stored in the cache, a final failure goes to
//! the node's error handler. Each rule lives in a file of its own:
//!
//! | rule | file |
//! |---|---|
//! | cache lookup and store | [`cache`] |
//! | interceptors around each attempt | [`intercept`] |
//! | run / idle / grace deadlines, the run deadline | [`deadline`] |
//! | execution per node kind | [`execute`] |
//! | retry decision and backoff wait | [`retry`] |
//! | `on_error` handlers | [`handler`] |
//! | the activation's record | [`record`] |
//! | one attempt between its trace events, its spend, its span | [`traced`] |
//! | a Paladin's fallback hops to the listeners | [`relay`] |
//!
//! Each rule extends the engine's [`Kit`], never the engine: the store is
//! out of reach, but for a Battalion's child run through
//! [`ActivationCtx::battalions`].

pub(super) mod activation;
mod cache;
mod deadline;
mod execute;
mod handler;
mod intercept;
mod record;
mod relay;
mod retry;
mod traced;

use tracing::Instrument;

use super::kit::Kit;
use crate::graph::{EffectScope, NodeSpec};
use crate::id::NodeId;
use crate::state::Battlefield;
use crate::waypoint::{Activation, NodeStatus};

use activation::{ActivationCtx, ActivationResult, AttemptEnd};
use record::Recorder;
use retry::AfterFailure;

/// The `aegis.node` span of one activation (disabled unless a subscriber
/// wants it); [`node_span_ended`] records how the activation ended on it.
pub(crate) fn node_span(act: &ActivationCtx<'_>, activation: &Activation) -> tracing::Span {
    let span = tracing::debug_span!(
        "aegis.node",
        otel.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        thread_id = %act.thread_id,
        superstep = act.superstep,
        node_id = %activation.node_id,
        task_key = act.task.map(|t| t.task_key.as_str()),
        cache_hit = tracing::field::Empty,
        cache_origin = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record(
            "otel.name",
            match act.task {
                Some(t) => format!("{}[{}]", activation.node_id, t.task_key),
                None => activation.node_id.to_string(),
            },
        );
    }
    span
}

/// Records how the activation ended on its [`node_span`].
pub(crate) fn node_span_ended(span: &tracing::Span, result: &ActivationResult) {
    let (outcome, failed) = match result {
        ActivationResult::Done { handled: None, .. } => ("succeeded", false),
        ActivationResult::Done { .. } => ("handled", true),
        ActivationResult::Failed { .. } => ("failed", true),
        ActivationResult::Shutdown { .. } => ("shutdown", false),
    };
    span.record("outcome", outcome);
    if failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// Drops the effect notes of an activation that did not finish.
struct NotesGuard<'a> {
    scope: Option<&'a EffectScope>,
    thread_id: &'a str,
    node_id: &'a NodeId,
    task_key: Option<&'a str>,
}

impl Drop for NotesGuard<'_> {
    fn drop(&mut self) {
        if let Some(scope) = self.scope {
            scope.take_notes(self.thread_id, self.node_id.as_str(), self.task_key);
        }
    }
}

impl Kit {
    /// Runs one activation to its end: success, final failure or shutdown
    /// (the caller runs it in its `aegis.node` span: see [`node_span`]).
    pub(crate) async fn run_activation(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        activation: &Activation,
    ) -> ActivationResult {
        let node_id = &activation.node_id;
        let paladin = matches!(act.spec, NodeSpec::Paladin { .. });
        let mut rec = Recorder::of_run(node_id, act.task, act.run_budget, paladin);
        // An activation dropped mid-way (a Battalion's child cut by its
        // parent's timeout) leaves no effect notes behind in the scope.
        let mut notes_guard = NotesGuard {
            scope: self.effects().map(|scope| &**scope),
            thread_id: act.thread_id,
            node_id,
            task_key: act.task.map(|t| t.task_key.as_str()),
        };
        // A hit executes nothing: no interceptor, no attempt.
        let key = self.cache_key(act, state, node_id);
        if let Some(key) = &key {
            rec.touch();
            let found = match self.cache_lookup_now(act, key, &rec) {
                Some(found) => found,
                None => self.cache_lookup(act, key, &rec).await,
            };
            let hit = found.into_hit();
            #[cfg(feature = "metrics")]
            if let Some(observer) = crate::trace::observe::observer() {
                observer.cache_lookup(node_id, hit.is_some());
            }
            if let Some(entry) = hit {
                return self.served(act, entry, node_id, &mut rec);
            }
            tracing::Span::current().record("cache_hit", false);
        }
        let mut result = self.attempts(act, state, node_id, &mut rec).await;
        // What became of the node's effects, onto its record (a load of a
        // counter for a node that made none).
        // Finished: the notes are taken here, the guard has none to drop.
        notes_guard.scope = None;
        if let Some(scope) = &self.effects() {
            let notes = scope.take_notes(
                act.thread_id,
                node_id.as_str(),
                act.task.map(|t| t.task_key.as_str()),
            );
            if !notes.is_empty() {
                for note in &notes {
                    self.emit(crate::trace::TraceEvent::Effect {
                        thread_id: act.thread_id.to_string(),
                        superstep: act.superstep,
                        node_id: node_id.clone(),
                        task_key: act.task.map(|t| t.task_key.clone()),
                        attempt: note.attempt,
                        effect: note.name.clone(),
                        key: note.key.clone(),
                        outcome: note.outcome,
                    });
                }
                result.record_mut().set_effects(notes);
            }
        }
        // Matched by reference first: a success (nearly every activation)
        // is returned as it came, not taken apart and rebuilt.
        match (&result, &act.aegis.on_error) {
            (
                ActivationResult::Done {
                    directive, record, ..
                },
                _,
            ) if matches!(record.status, NodeStatus::Succeeded) => {
                if let Some(policy) = act.aegis.cache.as_ref().filter(|_| key.is_some()) {
                    let origin = rec.origin(act.thread_id, record, policy.scope);
                    self.cache_store(act, key.as_ref(), directive, origin).await;
                }
                result
            }
            // The handler runs on the final failure only; never when the run
            // deadline passed (there is no time left to compensate in). A
            // retry skipped for budget leaves time: its handler runs.
            (
                ActivationResult::Failed {
                    budget_exhausted: false,
                    ..
                },
                Some(handler),
            ) => {
                let ActivationResult::Failed { error, record, .. } = result else {
                    return result; // matched just above
                };
                let result = self
                    .handle_failure(handler, *error, record, act.superstep, state)
                    .await;
                if let ActivationResult::Done {
                    handled: Some(_), ..
                } = &result
                {
                    self.emit(crate::trace::TraceEvent::HandlerRan {
                        thread_id: act.thread_id.to_string(),
                        superstep: act.superstep,
                        node_id: node_id.clone(),
                        task_key: act.task.map(|t| t.task_key.clone()),
                        handler: handler.kind(),
                    });
                }
                result
            }
            _ => result,
        }
    }

    /// Attempts under their timeouts, each between the interceptors, failed
    /// ones retried while the retry policy allows.
    async fn attempts(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
        rec: &mut Recorder<'_>,
    ) -> ActivationResult {
        let mut attempt = 1;
        loop {
            if self.cancellation().is_cancelled() {
                return rec.shutdown(attempt);
            }
            if !self.interceptors.is_empty() {
                rec.touch();
                if let Some(stop) = self.intercept_before(node_id, state, attempt, rec).await {
                    return stop;
                }
            }
            let span = tracing::debug_span!(
                "aegis.attempt",
                otel.status_code = tracing::field::Empty,
                attempt,
                outcome = tracing::field::Empty,
                transience = tracing::field::Empty,
                timeout = tracing::field::Empty,
                error = tracing::field::Empty,
                served_by = tracing::field::Empty,
                chain_position = tracing::field::Empty,
                model = tracing::field::Empty,
                retry_after_ms = tracing::field::Empty,
                retry_delay_ms = tracing::field::Empty,
                retry_skipped = tracing::field::Empty,
                retry_remaining_ms = tracing::field::Empty,
            );
            // Awaited where it is built either way: a future held in a local
            // and then awaited is moved (copied) into the await.
            let end = if span.is_disabled() {
                self.traced_attempt(act, state, node_id, attempt, rec).await
            } else {
                let end = {
                    let traced =
                        std::pin::pin!(self.traced_attempt(act, state, node_id, attempt, rec));
                    traced.instrument(span.clone()).await
                };
                traced::attempt_span(&span, &end, rec);
                end
            };
            let error = match end {
                // Without interceptors, no `after` future to build and
                // move the directive through: every success comes here.
                AttemptEnd::Done(directive) if self.interceptors.is_empty() => {
                    return intercept::succeeded(directive, attempt, rec);
                }
                AttemptEnd::Done(directive) => {
                    return self.intercept_after(node_id, directive, attempt, rec).await;
                }
                AttemptEnd::Shutdown => return rec.shutdown(attempt),
                AttemptEnd::Error(error) => error,
            };
            match self
                .next_attempt(act, node_id, &error, attempt, rec, &span)
                .await
            {
                AfterFailure::Retry => attempt += 1,
                AfterFailure::Shutdown => return rec.shutdown(attempt + 1),
                AfterFailure::GiveUp { budget_exhausted } => {
                    return ActivationResult::Failed {
                        error: Box::new(error),
                        record: rec.finish(NodeStatus::Failed, attempt),
                        budget_exhausted,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use std::time::Duration;

    use crate::engine::WarEngine;
    use crate::graph::{EngineLimits, NodeSpec, WarGraph};
    use crate::id::{END, START};
    use crate::state::BattlefieldSchema;
    use crate::waypoint::InMemoryWaypointStore;

    /// A run dropped while its node waits after an effect (a Battalion's
    /// child cut by its parent, a caller's timeout) leaves no notes in the
    /// engine's scope: later activations find none pending.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_activation_leaves_no_effect_notes_behind() {
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
        g.add_node(
            "pay",
            NodeSpec::from_fn("pay", |_, ctx| {
                Box::pin(async move {
                    let _: u32 = ctx
                        .effect("charge")
                        .run(|_| async { Ok::<_, String>(1) })
                        .await?;
                    std::future::pending::<()>().await;
                    Ok(crate::state::StateDelta::new().into())
                })
            }),
        )
        .add_edge(START, "pay")
        .add_edge("pay", END);
        let engine = WarEngine::new(InMemoryWaypointStore::new());
        let cut = tokio::time::timeout(Duration::from_secs(1), engine.start(&g, "t", json!({})));
        assert!(cut.await.is_err(), "the run never finishes by itself");
        let scope = engine
            .kit
            .effects()
            .expect("the in-memory store keeps a ledger");
        assert_eq!(scope.noted(), 0);
    }
}
