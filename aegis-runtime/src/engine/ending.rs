//! Why a thread stops.

use crate::error::{EngineError, NodeError};
use crate::graph::ParleyRequest;
use crate::id::NodeId;
use crate::waypoint::NodeExecutionRecord;

/// Why a thread stops: the outcome still to be written and returned.
pub(crate) enum Ending {
    Completed,
    /// The AwaitingInput waypoint is already written.
    AwaitingInput(Vec<(NodeId, ParleyRequest)>),
    Halted {
        pending: Vec<NodeId>,
        records: Vec<NodeExecutionRecord>,
    },
    Failed {
        error: EngineError,
        /// Boxed: a `NodeError` would make every `Ending` as large.
        node_error: Option<Box<NodeError>>,
        records: Vec<NodeExecutionRecord>,
    },
}

impl Ending {
    pub(crate) fn failed(
        error: EngineError,
        node_error: Option<NodeError>,
        records: Vec<NodeExecutionRecord>,
    ) -> Self {
        Ending::Failed {
            error,
            node_error: node_error.map(Box::new),
            records,
        }
    }
}
