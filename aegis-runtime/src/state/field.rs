//! `FieldName`: a validated state field name.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use super::StateError;

/// The validated name of a state field: `[A-Za-z_][A-Za-z0-9_]*`.
///
/// Cheap to clone (a shared string).
///
/// ```
/// use aegis_runtime::FieldName;
/// assert!(FieldName::new("draft").is_ok());
/// assert!(FieldName::new("2fast").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldName(Arc<str>);

impl FieldName {
    /// Validates and wraps a field name.
    pub fn new(name: impl AsRef<str>) -> Result<Self, StateError> {
        let name = name.as_ref();
        let reject = |reason| {
            Err(StateError::InvalidFieldName {
                name: name.to_string(),
                reason,
            })
        };
        let mut chars = name.chars();
        match chars.next() {
            None => return reject("a field name must not be empty"),
            Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
                return reject("a field name must start with an ASCII letter or `_`");
            }
            Some(_) => {}
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return reject("a field name may contain only ASCII letters, digits and `_`");
        }
        Ok(FieldName(Arc::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for FieldName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FieldName::new(s).map_err(serde::de::Error::custom)
    }
}

/// Anything that names a field: a [`FieldName`] or a string to validate.
pub trait IntoFieldName {
    /// Converts, validating strings.
    fn into_field_name(self) -> Result<FieldName, StateError>;
}

impl IntoFieldName for FieldName {
    fn into_field_name(self) -> Result<FieldName, StateError> {
        Ok(self)
    }
}

impl IntoFieldName for &FieldName {
    fn into_field_name(self) -> Result<FieldName, StateError> {
        Ok(self.clone())
    }
}

impl IntoFieldName for &str {
    fn into_field_name(self) -> Result<FieldName, StateError> {
        FieldName::new(self)
    }
}

impl IntoFieldName for String {
    fn into_field_name(self) -> Result<FieldName, StateError> {
        FieldName::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_identifiers_and_rejects_the_rest() {
        for ok in ["a", "_", "draft", "booking_error", "A1_b2"] {
            assert!(FieldName::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a b", "é", "a.b"] {
            assert!(
                matches!(
                    FieldName::new(bad),
                    Err(StateError::InvalidFieldName { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<FieldName>("\"ok_name\"").is_ok());
        assert!(serde_json::from_str::<FieldName>("\"not ok\"").is_err());
    }
}
