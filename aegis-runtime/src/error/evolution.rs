//! What differs between the graph a thread ran and the graph it is resumed
//! on, and why a resume refuses a difference.

use std::fmt;

use crate::id::NodeId;
use crate::state::{DispatchRule, FieldName};

/// One difference between two graphs' manifests, as
/// [`EngineError::GraphMismatch`](crate::error::EngineError::GraphMismatch) lists it.
///
/// Differences are informational: only an [`Incompatibility`] refuses a
/// resume.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GraphChange {
    /// A node the old graph did not have.
    NodeAdded {
        /// The node.
        node: NodeId,
        /// Its kind in the new graph.
        kind: String,
    },
    /// A node the new graph no longer has.
    NodeRemoved {
        /// The node.
        node: NodeId,
        /// Its kind in the old graph.
        kind: String,
    },
    /// A node whose kind changed (another `kind_name`, or another node type).
    NodeKindChanged {
        /// The node.
        node: NodeId,
        /// The old kind.
        from: String,
        /// The new kind.
        to: String,
    },
    /// A node that became, or stopped being, a worker template.
    WorkerTemplateChanged {
        /// The node.
        node: NodeId,
        /// Whether it is a worker template now.
        now_worker: bool,
    },
    /// A field the old schema did not declare.
    FieldAdded {
        /// The field.
        field: FieldName,
    },
    /// A field the new schema no longer declares.
    FieldRemoved {
        /// The field.
        field: FieldName,
    },
    /// A field whose dispatch rule changed.
    FieldDispatchChanged {
        /// The field.
        field: FieldName,
        /// The old rule.
        from: DispatchRule,
        /// The new rule.
        to: DispatchRule,
    },
}

impl fmt::Display for GraphChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphChange::NodeAdded { node, kind } => write!(f, "node `{node}` added ({kind})"),
            GraphChange::NodeRemoved { node, kind } => {
                write!(f, "node `{node}` removed (was {kind})")
            }
            GraphChange::NodeKindChanged { node, from, to } => {
                write!(f, "node `{node}` changed kind from {from} to {to}")
            }
            GraphChange::WorkerTemplateChanged { node, now_worker } => {
                if *now_worker {
                    write!(f, "node `{node}` became a worker template")
                } else {
                    write!(f, "node `{node}` is no longer a worker template")
                }
            }
            GraphChange::FieldAdded { field } => write!(f, "field `{field}` added"),
            GraphChange::FieldRemoved { field } => write!(f, "field `{field}` removed"),
            GraphChange::FieldDispatchChanged { field, from, to } => {
                write!(
                    f,
                    "field `{field}` changed dispatch from {from:?} to {to:?}"
                )
            }
        }
    }
}

/// Why a waiting thread cannot continue on a changed graph.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Incompatibility {
    /// A node the thread is about to run (its pending vanguard, an
    /// unfinished activation, a parley awaiting its answer, a `Goto` or
    /// `Muster` already decided) is gone.
    PendingNodeRemoved {
        /// The node.
        node: NodeId,
    },
    /// A node the thread is about to run has another kind now.
    PendingNodeKindChanged {
        /// The node.
        node: NodeId,
        /// The kind the thread ran it as.
        from: String,
        /// Its kind now.
        to: String,
    },
    /// The thread has mustered tasks for a node that is no longer a worker
    /// template.
    WorkerTemplateGone {
        /// The node.
        node: NodeId,
    },
    /// The stored state holds a field the new schema no longer declares.
    StoredFieldRemoved {
        /// The field.
        field: FieldName,
    },
    /// A field the stored state holds merges by another rule now.
    StoredFieldDispatchChanged {
        /// The field.
        field: FieldName,
        /// The rule its value was written under.
        from: DispatchRule,
        /// The rule now.
        to: DispatchRule,
    },
    /// A new field is required and has no default: the thread's input,
    /// long gone, cannot set it.
    NewFieldRequired {
        /// The field.
        field: FieldName,
    },
    /// The migration registered for the thread's fingerprint maps a node
    /// the thread is about to run to a node this graph does not have.
    MappedNodeMissing {
        /// The node as the thread knew it.
        from: NodeId,
        /// The node the migration maps it to.
        to: NodeId,
    },
    /// The migration registered for the thread's fingerprint failed.
    MigrationFailed {
        /// What it said.
        message: String,
    },
    /// The state the migration returned, or the stored state with new
    /// fields' defaults filled in, does not fit the new schema.
    StateDoesNotFit {
        /// Why.
        message: String,
    },
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatibility::PendingNodeRemoved { node } => {
                write!(
                    f,
                    "the waiting thread will run node `{node}`, which this graph no longer has"
                )
            }
            Incompatibility::PendingNodeKindChanged { node, from, to } => write!(
                f,
                "the waiting thread will run node `{node}`, whose kind changed from {from} to {to}"
            ),
            Incompatibility::WorkerTemplateGone { node } => write!(
                f,
                "the waiting thread has tasks mustered for `{node}`, which is no longer a worker template"
            ),
            Incompatibility::StoredFieldRemoved { field } => write!(
                f,
                "the stored state holds field `{field}`, which this schema no longer declares"
            ),
            Incompatibility::StoredFieldDispatchChanged { field, from, to } => write!(
                f,
                "the stored state holds field `{field}`, whose dispatch rule changed from {from:?} to {to:?}"
            ),
            Incompatibility::NewFieldRequired { field } => write!(
                f,
                "new field `{field}` is required and has no default, and a resumed thread takes no input"
            ),
            Incompatibility::MappedNodeMissing { from, to } => write!(
                f,
                "the migration maps node `{from}`, which the waiting thread will run, to `{to}`, which this graph does not have"
            ),
            Incompatibility::MigrationFailed { message } => {
                write!(f, "the migration failed: {message}")
            }
            Incompatibility::StateDoesNotFit { message } => {
                write!(
                    f,
                    "the stored (or migrated) state does not fit this schema: {message}"
                )
            }
        }
    }
}

/// A migration's refusal: the state it was given cannot be carried over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct MigrationError {
    /// Why.
    pub message: String,
}

impl MigrationError {
    /// A refusal saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        MigrationError {
            message: message.into(),
        }
    }
}

/// `items` joined with `sep`, for error messages.
pub(crate) fn join<T: fmt::Display>(items: &[T], sep: &str) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}
