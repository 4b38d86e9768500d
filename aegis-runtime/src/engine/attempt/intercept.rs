//! Interceptors around each attempt: `before` may skip or fail it, `after`
//! may drop or fail a success. The first that does not continue decides.

use super::activation::ActivationResult;
use super::record::Recorder;
use crate::engine::hooks::InterceptorDecision;
use crate::engine::kit::Kit;
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::graph::Directive;
use crate::id::NodeId;
use crate::state::{Battlefield, StateDelta};
use crate::trace::AttemptStatus;
use crate::waypoint::NodeStatus;

impl Kit {
    /// Runs every `before` hook; `Some` ends the activation before
    /// `attempt` runs.
    pub(super) async fn intercept_before(
        &self,
        node_id: &NodeId,
        state: &Battlefield,
        attempt: u32,
        rec: &mut Recorder<'_>,
    ) -> Option<ActivationResult> {
        for i in &self.interceptors {
            match i.before(node_id, state).await {
                InterceptorDecision::Continue => {}
                other => return Some(stopped(other, node_id, attempt, rec)),
            }
        }
        None
    }

    /// Runs every `after` hook on a success: the activation's end.
    pub(super) async fn intercept_after(
        &self,
        node_id: &NodeId,
        directive: Directive,
        attempt: u32,
        rec: &mut Recorder<'_>,
    ) -> ActivationResult {
        if !self.interceptors.is_empty() {
            rec.touch();
        }
        for i in &self.interceptors {
            match i.after(node_id, &directive).await {
                InterceptorDecision::Continue => {}
                other => return stopped(other, node_id, attempt, rec),
            }
        }
        succeeded(directive, attempt, rec)
    }
}

/// The activation's end when `attempt` succeeded and no `after` hook
/// objected (an engine without interceptors comes here directly).
#[inline]
pub(super) fn succeeded(
    directive: Directive,
    attempt: u32,
    rec: &mut Recorder<'_>,
) -> ActivationResult {
    ActivationResult::Done {
        directive,
        record: rec.finish(NodeStatus::Succeeded, attempt),
        handled: None,
    }
}

/// What a `Skip` or `Fail` decision makes of the activation.
fn stopped(
    decision: InterceptorDecision,
    node_id: &NodeId,
    attempt: u32,
    rec: &mut Recorder<'_>,
) -> ActivationResult {
    let result = match decision {
        InterceptorDecision::Fail(message) => rec.failed(
            NodeError::new(
                node_id.clone(),
                attempt,
                Transience::Permanent,
                NodeErrorSource::Interceptor { message },
            ),
            attempt,
        ),
        // `Continue` is never passed here.
        InterceptorDecision::Skip | InterceptorDecision::Continue => ActivationResult::Done {
            directive: Directive::edges(StateDelta::new()),
            record: rec.finish(
                NodeStatus::Skipped {
                    reason: "interceptor".to_string(),
                },
                attempt,
            ),
            handled: None,
        },
    };
    // A success dropped here streamed an answer that is never merged.
    rec.discard_streamed(|| match &result {
        ActivationResult::Failed { error, .. } => AttemptStatus::Failed(NodeError::clone(error)),
        _ => AttemptStatus::Skipped {
            reason: "interceptor".to_string(),
        },
    });
    result
}
