//! Execution per node kind: a Function runs its `StateNode`, a Paladin
//! renders its prompt and calls the port (its output checked against its
//! schema), a Gate raises or routes its parley, a Battalion runs its child
//! graph. A panic is a failed attempt of kind `Panic`.

use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use tokio_util::task::AbortOnDropHandle;

use super::activation::ActivationCtx;
use crate::engine::battalion_call::BattalionCall;
use crate::engine::kit::Kit;
use crate::error::{NodeError, NodeErrorSource, PaladinError, Transience};
use crate::graph::{Directive, NodeContext, NodeSpec, ParleyRequest, StateNode, TemplateError};
use crate::graph::{Paladin, Served};
use crate::paladin::{PaladinPort, parse_and_check};
use crate::state::{Battlefield, FieldName, StateDelta};
use crate::trace::ambient;
use tracing::Instrument;

impl Kit {
    /// Executes a node once; a panic is caught as a `Panic` error.
    ///
    /// With isolated attempts on a multi-thread runtime, a Function or
    /// Paladin attempt runs as a task of its own, so a node that blocks its
    /// thread holds only that worker: the run's own task still sees its
    /// deadlines fire and moves on (the abandoned task is aborted, and its
    /// result, if it ever comes, dropped). Otherwise, and always on a
    /// current-thread runtime (no other worker to move to), the attempt runs
    /// inline; a late result is still cut after the fact.
    pub(super) async fn execute_caught(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        ctx: NodeContext,
    ) -> Result<Directive, NodeError> {
        let (node_id, attempt) = (ctx.node_id.clone(), ctx.attempt);
        let panicked = |payload: Box<dyn std::any::Any + Send>| {
            NodeError::new(
                node_id.clone(),
                attempt,
                Transience::Unknown,
                NodeErrorSource::Panic {
                    message: panic_message(&*payload),
                },
            )
        };
        let multi_thread = self.isolated_attempts
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let job = match act.spec {
            NodeSpec::Function(node) if multi_thread => {
                let (node, state) = (node.clone(), state.clone());
                async move { run_function(&*node, &state, &ctx).await }.boxed()
            }
            NodeSpec::Paladin {
                paladin,
                input,
                output_field,
                output_schema,
            } if multi_thread => {
                let prompt = input.render_with(state, act.task);
                let (port, paladin) = (self.paladin_port.clone(), paladin.clone());
                let (field, schema) = (output_field.clone(), output_schema.clone());
                async move {
                    run_paladin(&*port, &paladin, prompt, &field, schema.as_ref(), &ctx).await
                }
                .boxed()
            }
            NodeSpec::Paladin { .. } => {
                // Boxed: a model call dwarfs an allocation, and inline its
                // hop relay would enlarge every node's attempt future.
                let run = AssertUnwindSafe(self.execute(act, state, &ctx)).catch_unwind();
                return Box::pin(ambient::within(self.hop_relay(&node_id), run))
                    .await
                    .unwrap_or_else(|payload| Err(panicked(payload)));
            }
            _ => {
                return AssertUnwindSafe(self.execute(act, state, &ctx))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|payload| Err(panicked(payload)));
            }
        };
        // A Paladin's hops reach the engine's listeners from its own task.
        let job = match act.spec {
            NodeSpec::Paladin { .. } => ambient::within(self.hop_relay(&node_id), job).boxed(),
            _ => job,
        };
        // The attempt's span goes with it onto its own task.
        let job = job.instrument(tracing::Span::current());
        // Aborted when its driver gives up on it (a timeout, a shutdown, a
        // dropped run): a task still running then would only burn time.
        let mut task = AbortOnDropHandle::new(tokio::spawn(job));
        (&mut task).await.unwrap_or_else(|e| {
            let payload = e
                .try_into_panic()
                .unwrap_or_else(|_| Box::new("the attempt's task was cancelled"));
            Err(panicked(payload))
        })
    }

    /// Executes a node once, on the calling task.
    async fn execute(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, NodeError> {
        match act.spec {
            NodeSpec::Function(node) => run_function(&**node, state, ctx).await,
            NodeSpec::Paladin {
                paladin,
                input,
                output_field,
                output_schema,
            } => {
                let prompt = input.render_with(state, act.task);
                let port = &*self.paladin_port;
                run_paladin(
                    port,
                    paladin,
                    prompt,
                    output_field,
                    output_schema.as_ref(),
                    ctx,
                )
                .await
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
                act.battalions
                    .run_battalion(BattalionCall {
                        child,
                        inputs,
                        outputs,
                        state,
                        ctx,
                        visit: act.visit,
                        grace: act.shutdown_grace,
                        enclosing: act.attempt_deadline(self.enclosing_deadline),
                    })
                    .await
            }
        }
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

fn node_error(ctx: &NodeContext, transience: Transience, source: NodeErrorSource) -> NodeError {
    NodeError::new(ctx.node_id.clone(), ctx.attempt, transience, source)
}

/// One attempt of a Function node.
async fn run_function(
    node: &dyn StateNode,
    state: &Battlefield,
    ctx: &NodeContext,
) -> Result<Directive, NodeError> {
    match node.run(state, ctx).await {
        Ok(d) => {
            // A node that handled its effect's `NeedsHuman` itself leaves
            // no parley pending (free when none is).
            if let Some(scope) = &ctx.shared.effects {
                scope.take_ask(ctx);
            }
            Ok(d)
        }
        // An effect that asked a human about its unknown outcome failed the
        // attempt with `EffectError::NeedsHuman`: the attempt raises its
        // parley instead (only then is the engine's effect scope read).
        Err(e) => match ctx.shared.effects.as_ref().and_then(|s| s.take_ask(ctx)) {
            Some(request) => Ok(Directive::parley(request)),
            None => Err(node_error(
                ctx,
                e.transience,
                NodeErrorSource::Function { message: e.message },
            )
            .with_retry_after(e.retry_after)),
        },
    }
}

/// One attempt of a Paladin node: the rendered prompt to the port, the
/// output (checked against its schema, if any) into its field.
async fn run_paladin(
    port: &dyn PaladinPort,
    paladin: &Paladin,
    prompt: Result<String, TemplateError>,
    output_field: &FieldName,
    output_schema: Option<&serde_json::Value>,
    ctx: &NodeContext,
) -> Result<Directive, NodeError> {
    let paladin_error = |e: PaladinError| {
        node_error(ctx, e.transience(), NodeErrorSource::from(&e)).with_retry_after(e.retry_after())
    };
    let prompt =
        prompt.map_err(|e| paladin_error(PaladinError::ConfigurationError(e.to_string())))?;
    let result = port
        .execute_in(paladin, &prompt, ctx)
        .await
        .map_err(paladin_error)?;
    ctx.served.set(Served {
        served_by: result.served_by.clone(),
        model: result.model.clone(),
        chain_position: result.chain_position,
        fallback: result.fallback,
    });
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
