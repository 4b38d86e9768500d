//! `FieldName`: a validated state field name.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::StateError;

/// The validated name of a state field: `[A-Za-z_][A-Za-z0-9_]*`.
///
/// Cheap to clone: a name of up to 22 bytes (nearly every one) is kept in
/// place, a longer one is a shared string.
///
/// ```
/// use aegis_runtime::state::FieldName;
/// assert!(FieldName::new("draft").is_ok());
/// assert!(FieldName::new("2fast").is_err());
/// ```
#[derive(Clone)]
pub struct FieldName(Repr);

/// The longest name kept in place: the enum is then as large as a
/// pointer-and-length pair plus its tag, 24 bytes.
const INLINE: usize = 22;

#[derive(Clone)]
enum Repr {
    /// In place: every node's `delta.set("field", ..)` makes a name, which
    /// then costs no allocation.
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Shared(Arc<str>),
}

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
        let mut bytes = [0; INLINE];
        Ok(FieldName(
            match (bytes.get_mut(..name.len()), u8::try_from(name.len())) {
                (Some(place), Ok(len)) => {
                    place.copy_from_slice(name.as_bytes());
                    Repr::Inline { len, bytes }
                }
                _ => Repr::Shared(Arc::from(name)),
            },
        ))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Validated ASCII, so the check passes; it is what keeps the
            // crate free of `unsafe`. Comparing and hashing go by bytes,
            // which need no check.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Shared(name) => name,
        }
    }

    /// The name's bytes (ASCII): what comparisons and hashes read.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Repr::Shared(name) => name.as_bytes(),
        }
    }
}

// By bytes, as `str` compares (byte order is its order) and hashes them,
// so that `Borrow<str>` lookups agree whichever way a name is kept.
impl PartialEq for FieldName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for FieldName {}

impl PartialOrd for FieldName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FieldName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for FieldName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // What `str::hash` does (`Hasher::write_str`'s default, which only
        // an unstable feature can change): the bytes, then 0xff.
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for FieldName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
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
    use std::hash::{Hash, Hasher};

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
    fn short_and_long_names_read_compare_and_hash_alike() {
        use std::collections::HashSet;
        let short = "a".repeat(INLINE);
        let long = "a".repeat(INLINE + 1);
        let (s, l) = (
            FieldName::new(&short).unwrap(),
            FieldName::new(&long).unwrap(),
        );
        assert!(matches!(s.0, Repr::Inline { .. }));
        assert!(matches!(l.0, Repr::Shared(_)));
        assert_eq!((s.as_str(), l.as_str()), (short.as_str(), long.as_str()));
        assert!(s < l);
        assert_eq!(s.cmp(&l), short.cmp(&long));
        // Found by `&str` (the schema's and the state's lookups) either way.
        let set: HashSet<FieldName> = [s.clone(), l.clone()].into_iter().collect();
        assert!(set.contains(short.as_str()) && set.contains(long.as_str()));
        let hash = |h: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut state = std::collections::hash_map::DefaultHasher::new();
            h(&mut state);
            state.finish()
        };
        for (name, text) in [(&s, &short), (&l, &long)] {
            assert_eq!(hash(&|h| name.hash(h)), hash(&|h| text.as_str().hash(h)));
        }
        assert_eq!(format!("{s:?} {l}"), format!("{short:?} {long}"));
        assert_eq!(std::mem::size_of::<FieldName>(), 24);
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<FieldName>("\"ok_name\"").is_ok());
        assert!(serde_json::from_str::<FieldName>("\"not ok\"").is_err());
    }
}
