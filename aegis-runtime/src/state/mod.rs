//! Workflow state: field names, the schema, immutable snapshots and deltas.

mod battlefield;
mod delta;
mod field;
mod fields;
pub(crate) mod merge;
mod schema;
mod slot;

pub use battlefield::Battlefield;
pub use delta::StateDelta;
pub use field::{FieldName, IntoFieldName};
pub use merge::MergeError;
pub(crate) use merge::{MergeWriter, merge_with};
pub(crate) use merge::{Writer, initial_state, merge};
pub use schema::{BattlefieldSchema, CacheMarker, DispatchRule, FieldSpec};
pub(crate) use slot::FieldPart;

/// An error building state: a bad field name or a value that is not JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A field name is empty or not of the form `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("invalid field name {name:?}: {reason}")]
    InvalidFieldName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A value could not be serialised to JSON.
    #[error("value for field `{field}` is not serialisable: {message}")]
    NotSerializable {
        /// The field being written.
        field: String,
        /// The serializer's message.
        message: String,
    },
}
