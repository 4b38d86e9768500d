//! `StateDelta`: the writes one node makes in one superstep.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::{FieldName, IntoFieldName, StateError};

/// The writes one node makes in one superstep, merged at the barrier by each
/// field's [`DispatchRule`](super::DispatchRule).
///
/// Setting a field twice in one delta keeps the second value.
///
/// ```
/// use aegis_runtime::StateDelta;
/// let mut delta = StateDelta::new();
/// delta.set("answer", 42)?.set("done", true)?;
/// assert_eq!(delta.get("answer"), Some(&serde_json::json!(42)));
/// # Ok::<(), aegis_runtime::StateError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateDelta {
    writes: BTreeMap<FieldName, Value>,
}

impl StateDelta {
    /// An empty delta.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` (anything `Serialize`) to `field`.
    pub fn set(
        &mut self,
        field: impl IntoFieldName,
        value: impl Serialize,
    ) -> Result<&mut Self, StateError> {
        let field = field.into_field_name()?;
        let value = serde_json::to_value(value).map_err(|e| StateError::NotSerializable {
            field: field.to_string(),
            message: e.to_string(),
        })?;
        self.writes.insert(field, value);
        Ok(self)
    }

    /// The value written to `field`, if any.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.writes.get(field)
    }

    /// Every write, ordered by field name.
    pub fn iter(&self) -> impl Iterator<Item = (&FieldName, &Value)> {
        self.writes.iter()
    }

    /// Whether the delta writes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// How many fields the delta writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }
}
