//! How a trace line names one activation.

use std::fmt;

use crate::id::NodeId;

/// `node` or `node[task]` for a mustered task.
pub(super) struct Activation<'a>(pub(super) &'a NodeId, pub(super) &'a Option<String>);

impl fmt::Display for Activation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(task) => write!(f, "{}[{task}]", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}
