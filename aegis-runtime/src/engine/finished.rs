//! One finished activation as the barrier (and a stream's update) reads it.

use crate::graph::Directive;
use crate::waypoint::{Activation, CompletedActivation, HandledFailure, NodeStatus};

/// One finished activation as the barrier reads it: finished in this call,
/// or earlier in a superstep that was interrupted (or wrote progress
/// waypoints) and is kept in the cursor.
pub(crate) struct Finished<'a> {
    pub(crate) activation: &'a Activation,
    pub(crate) directive: &'a Directive,
    pub(crate) handled: Option<&'a HandledFailure>,
    /// The directive is the error handler's (the node itself failed).
    pub(super) from_handler: bool,
}

impl<'a> Finished<'a> {
    pub(super) fn kept(c: &'a CompletedActivation) -> Self {
        Finished {
            activation: &c.activation,
            directive: &c.directive,
            handled: c.handled.as_deref(),
            from_handler: c.record.status == NodeStatus::Failed,
        }
    }
}
