//! Battalion nodes: a child graph run as one node, in its own durable thread.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

use super::WarEngine;
use super::battalion_call::{BattalionCall, RunsBattalion};
use super::outcome::RunOutcome;
use crate::error::{EngineError, NodeError, NodeErrorSource, Transience};
use crate::graph::HeartbeatHandle;
use crate::graph::{Directive, ParleyRequest};
use crate::id::{battalion_thread_id, validate_thread_id};
use crate::state::StateDelta;
use crate::waypoint::{WaypointStatus, WaypointStore};

impl<S: WaypointStore> RunsBattalion for WarEngine<S> {
    fn run_battalion<'a>(
        &'a self,
        call: BattalionCall<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<Directive, NodeError>> + Send + 'a>> {
        // Boxed in any case: a child run is an engine run, so the future
        // recurses.
        Box::pin(self.battalion(call))
    }
}

impl<S: WaypointStore> WarEngine<S> {
    /// An engine for a child run: the same store, port, registries, sinks
    /// and cache; a child of the cancellation token; the parent attempt's
    /// heartbeat, beaten once per child superstep; and the parent attempt's
    /// shutdown grace as the ceiling of the child's; and `enclosing`, the
    /// instant the parent attempt is cut, as the child's enclosing deadline.
    fn child_engine(
        &self,
        heartbeat: HeartbeatHandle,
        grace: Duration,
        enclosing: Option<Instant>,
    ) -> WarEngine<S> {
        let mut engine = self.derived();
        engine.kit.superstep_beat = Some(heartbeat);
        engine.kit.grace_cap = Some(grace);
        engine.kit.enclosing_deadline = enclosing;
        engine
    }

    /// One attempt of a Battalion node: start the child thread, or continue
    /// it (after a parley, a halt, or a parent crash), and map its outcome.
    async fn battalion(&self, call: BattalionCall<'_>) -> Result<Directive, NodeError> {
        let BattalionCall {
            child,
            inputs,
            outputs,
            state,
            ctx,
            visit,
            grace,
            enclosing,
        } = call;
        // Each visit of the node is its own child thread, named so that no
        // other parent's child and no caller's thread can share it.
        let thread = battalion_thread_id(&ctx.thread_id, &ctx.node_id, visit);
        let fail = |transience, message: String| NodeError {
            node_id: ctx.node_id.clone(),
            attempt: ctx.attempt,
            transience,
            source: NodeErrorSource::Battalion {
                child_thread: thread.clone(),
                message,
            },
            retry_after: None,
        };
        // Too long for a store (a deep nesting under a long root id): no
        // retry can fix that.
        validate_thread_id(&thread).map_err(|e| fail(Transience::Permanent, e.to_string()))?;
        let engine = self.child_engine(ctx.heartbeat.clone(), grace, enclosing);
        // A timed-out parent attempt drops this future; the guard then
        // cancels the child's token too.
        let _guard = engine.kit.cancellation().clone().drop_guard();
        let latest = engine
            .store
            .latest(&thread)
            .await
            .map_err(|e| fail(Transience::Transient, e.to_string()))?;
        let outcome = match latest.map(|w| w.status) {
            None => {
                let mut input = serde_json::Map::new();
                for (parent, child_field) in inputs {
                    if let Some(v) = state.get(parent.as_str()) {
                        input.insert(child_field.to_string(), v.clone());
                    }
                }
                engine
                    .start_thread(child, &thread, serde_json::Value::Object(input))
                    .await
            }
            Some(WaypointStatus::AwaitingInput { .. }) => {
                engine
                    .resume_thread(child, &thread, ctx.parley_response.clone())
                    .await
            }
            Some(_) => engine.resume_thread(child, &thread, None).await,
        };
        match outcome {
            Ok(RunOutcome::Completed { state: out, .. }) => {
                let mut delta = StateDelta::new();
                for (child_field, parent) in outputs {
                    if let Some(v) = out.get(child_field.as_str()) {
                        delta
                            .set(parent, v)
                            .map_err(|e| fail(Transience::Permanent, e.to_string()))?;
                    }
                }
                Ok(Directive::edges(delta))
            }
            Ok(RunOutcome::AwaitingInput { requests, .. }) => {
                // The parent suspends with the child's question; its answer
                // is routed back down on resume.
                let (node, first) = requests.into_iter().next().ok_or_else(|| {
                    fail(Transience::Unknown, "a parley without a request".into())
                })?;
                Ok(Directive::parley(ParleyRequest {
                    prompt: first.prompt,
                    payload: serde_json::json!({
                        "child_thread": thread,
                        "node": node,
                        "payload": first.payload,
                    }),
                    expires_after: first.expires_after,
                    on_expire: first.on_expire,
                }))
            }
            Ok(RunOutcome::Halted { .. }) => Err(NodeError {
                node_id: ctx.node_id.clone(),
                attempt: ctx.attempt,
                transience: Transience::Transient,
                source: NodeErrorSource::Cancelled,
                retry_after: None,
            }),
            Ok(RunOutcome::Failed { error, .. }) => {
                let transience = error
                    .node_error()
                    .map_or(Transience::Unknown, |e| e.transience);
                Err(fail(transience, error.to_string()))
            }
            Err(e @ EngineError::Store(_)) => Err(fail(Transience::Transient, e.to_string())),
            Err(e) => Err(fail(Transience::Permanent, e.to_string())),
        }
    }
}
