//! The Battlefield's schema: its fields, their dispatch rules, defaults and
//! cache markers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::FieldName;

/// How one superstep merges the writes of several nodes into a field.
///
/// Merge order is deterministic: vanguard order (node id, then task index),
/// never completion order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DispatchRule {
    /// The written value replaces the old one. Two writers of one field in
    /// one superstep is `EngineError::ConflictingWrites`, never a silent pick.
    LastWrite,
    /// The field is a list. A written array is concatenated onto it; any
    /// other written value is appended as one item.
    Append,
    /// The field is a number; writes are added to it (an absent field is 0).
    Sum,
    /// The field is a JSON object; a written object is merged into it
    /// shallowly, key by key, later writers winning per key.
    Merge,
}

/// Whether a field's writes may be served from the node cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CacheMarker {
    /// Writes to this field may be cached and replayed (the default).
    #[default]
    Allow,
    /// Never store a delta touching this field, and reject a cached Paladin
    /// node whose output field is marked so.
    Deny,
}

/// The declaration of one state field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FieldSpec {
    /// The field's name.
    pub name: FieldName,
    /// How concurrent writes merge.
    pub dispatch: DispatchRule,
    /// The value a run starts with when the input does not set it.
    pub default: Option<Value>,
    /// Whether the initial input must set this field.
    pub required: bool,
    /// Whether cached deltas may write this field.
    pub cache: CacheMarker,
}

impl FieldSpec {
    /// Declares a field.
    pub fn new(
        name: FieldName,
        dispatch: DispatchRule,
        default: Option<Value>,
        required: bool,
    ) -> Self {
        FieldSpec {
            name,
            dispatch,
            default,
            required,
            cache: CacheMarker::Allow,
        }
    }

    /// Sets the field's cache marker.
    pub fn with_cache(mut self, marker: CacheMarker) -> Self {
        self.cache = marker;
        self
    }
}

/// The declared fields of a graph's state.
///
/// Construction never fails; duplicate names are reported by
/// `WarGraph::validate` together with every other problem.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BattlefieldSchema {
    fields: Vec<FieldSpec>,
}

impl BattlefieldSchema {
    /// A schema of these fields, in declaration order.
    pub fn new(fields: Vec<FieldSpec>) -> Self {
        BattlefieldSchema { fields }
    }

    /// The declaration of `name`, if declared.
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.find(name.as_bytes())
    }

    /// [`field`](Self::field) by a name already made.
    pub(crate) fn spec_of(&self, name: &FieldName) -> Option<&FieldSpec> {
        self.find(name.as_bytes())
    }

    fn find(&self, name: &[u8]) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name.as_bytes() == name)
    }

    /// Every declaration, in declaration order.
    pub fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    /// Names declared more than once, each reported once, sorted.
    pub fn duplicate_names(&self) -> Vec<FieldName> {
        let mut seen = std::collections::BTreeSet::new();
        let mut dups = std::collections::BTreeSet::new();
        for f in &self.fields {
            if !seen.insert(&f.name) {
                dups.insert(f.name.clone());
            }
        }
        dups.into_iter().collect()
    }
}
