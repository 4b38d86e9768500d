//! The `on_error` rule: a node's final failure goes to its handler — Route
//! writes the error into a field and jumps, Absorb contributes a fallback
//! delta, Custom asks a registered [`ErrorHandler`](crate::engine::ErrorHandler).
//! The record stays Failed either way.

use super::activation::ActivationResult;
use crate::engine::kit::Kit;
use crate::error::NodeError;
use crate::graph::{Directive, NextStep};
use crate::policy::ErrorHandlerSpec;
use crate::state::{Battlefield, StateDelta};
use crate::waypoint::{HandledFailure, HandlerKind, NodeExecutionRecord};

impl Kit {
    /// Applies a node's `on_error` to its final failure.
    pub(super) async fn handle_failure(
        &self,
        handler: &ErrorHandlerSpec,
        error: NodeError,
        record: NodeExecutionRecord,
        superstep: u32,
        state: &Battlefield,
    ) -> ActivationResult {
        let unhandled = |error| ActivationResult::Failed {
            error: Box::new(error),
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
        let handled = HandledFailure {
            node_id: record.node_id.clone(),
            task_key: record.task_key.clone(),
            superstep,
            error,
            handler: HandlerKind::of(handler),
        };
        ActivationResult::Done {
            directive,
            record,
            handled: Some(Box::new(handled)),
        }
    }
}
