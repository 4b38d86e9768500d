//! `StateDelta`: the writes one node makes in one superstep.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::{FieldName, IntoFieldName, StateError};

/// The writes one node makes in one superstep, merged at the barrier by each
/// field's [`DispatchRule`](super::DispatchRule).
///
/// Setting a field twice in one delta keeps the second value.
///
/// ```
/// use aegis_runtime::state::StateDelta;
/// let mut delta = StateDelta::new();
/// delta.set("answer", 42)?.set("done", true)?;
/// assert_eq!(delta.get("answer"), Some(&serde_json::json!(42)));
/// # Ok::<(), aegis_runtime::state::StateError>(())
/// ```
#[derive(Clone, Default)]
pub struct StateDelta {
    /// Sorted by field name, each name once. A node writes a field or two:
    /// a sorted vector of them is one small allocation, where an ordered
    /// map allocates a whole node (eleven slots) for the first write.
    writes: Writes,
}

#[derive(Clone)]
enum Writes {
    /// A delta being built, or built once and used once (a node's).
    Own(Vec<(FieldName, Value)>),
    /// A delta served many times (a cache entry's): a clone is a reference
    /// count, not a copy of every value.
    Shared(Arc<[(FieldName, Value)]>),
}

impl Default for Writes {
    fn default() -> Self {
        Writes::Own(Vec::new())
    }
}

impl PartialEq for StateDelta {
    fn eq(&self, other: &Self) -> bool {
        self.pairs() == other.pairs()
    }
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
        self.insert(field, value);
        Ok(self)
    }

    fn insert(&mut self, field: FieldName, value: Value) {
        // A shared delta is copied out before its first new write.
        if let Writes::Shared(shared) = &self.writes {
            self.writes = Writes::Own(shared.to_vec());
        }
        let Writes::Own(writes) = &mut self.writes else {
            return;
        };
        match writes.binary_search_by(|(f, _)| f.cmp(&field)) {
            Ok(i) => writes[i].1 = value,
            Err(i) => {
                // Most deltas write one field, and a finished task's is
                // kept until its superstep merges: room for one, not the
                // four a first push reserves.
                if writes.capacity() == 0 {
                    writes.reserve_exact(1);
                }
                writes.insert(i, (field, value));
            }
        }
    }

    fn pairs(&self) -> &[(FieldName, Value)] {
        match &self.writes {
            Writes::Own(writes) => writes,
            Writes::Shared(writes) => writes,
        }
    }

    /// This delta in the form that is cheap to clone, for one kept and
    /// served many times (a cache entry's delta).
    pub(crate) fn into_shared(self) -> StateDelta {
        match self.writes {
            Writes::Own(writes) => StateDelta {
                writes: Writes::Shared(writes.into()),
            },
            shared @ Writes::Shared(_) => StateDelta { writes: shared },
        }
    }

    /// The value written to `field`, if any.
    pub fn get(&self, field: &str) -> Option<&Value> {
        let writes = self.pairs();
        writes
            .binary_search_by(|(f, _)| f.as_bytes().cmp(field.as_bytes()))
            .ok()
            .map(|i| &writes[i].1)
    }

    /// Every write, ordered by field name.
    pub fn iter(&self) -> impl Iterator<Item = (&FieldName, &Value)> {
        self.pairs().iter().map(|(f, v)| (f, v))
    }

    /// Whether the delta writes nothing.
    pub fn is_empty(&self) -> bool {
        self.pairs().is_empty()
    }

    /// How many fields the delta writes.
    pub fn len(&self) -> usize {
        self.pairs().len()
    }
}

impl fmt::Debug for StateDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDelta")
            .field("writes", &WritesDebug(self))
            .finish()
    }
}

struct WritesDebug<'a>(&'a StateDelta);

impl fmt::Debug for WritesDebug<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

/// Stored as `{"writes": {field: value, ..}}`, exactly as the ordered map
/// it replaced: cache entries and waypoints written before still read.
impl Serialize for StateDelta {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Writes<'a>(&'a StateDelta);
        impl Serialize for Writes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in self.0.iter() {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("StateDelta", 1)?;
        st.serialize_field("writes", &Writes(self))?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for StateDelta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The stored writes, a map read into the sorted vector (a repeated
        /// field keeps its last value, as a map would).
        struct Writes(StateDelta);
        impl<'de> Deserialize<'de> for Writes {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Writes;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a map of field names to values")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Writes, A::Error> {
                        let mut delta = StateDelta::new();
                        while let Some((k, v)) = map.next_entry::<FieldName, Value>()? {
                            delta.insert(k, v);
                        }
                        Ok(Writes(delta))
                    }
                }
                d.deserialize_map(V)
            }
        }
        #[derive(Deserialize)]
        struct Stored {
            writes: Writes,
        }
        Ok(Stored::deserialize(d)?.writes.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn a_later_write_wins_and_writes_read_in_name_order() {
        let mut d = StateDelta::new();
        d.set("b", 1)
            .unwrap()
            .set("a", 2)
            .unwrap()
            .set("b", 3)
            .unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d.get("a"), d.get("b"), d.get("c")),
            (Some(&json!(2)), Some(&json!(3)), None)
        );
        let names: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn stored_exactly_as_the_map_it_replaced() {
        #[derive(Serialize, Deserialize)]
        struct Before {
            writes: BTreeMap<FieldName, Value>,
        }
        let mut d = StateDelta::new();
        d.set("zeta", "z")
            .unwrap()
            .set("alpha", json!({"k": [1]}))
            .unwrap();
        let before = Before {
            writes: d.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, serde_json::to_string(&before).unwrap());
        assert_eq!(json, r#"{"writes":{"alpha":{"k":[1]},"zeta":"z"}}"#);
        let back: StateDelta = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        // A shared delta reads, compares and stores alike, and copies itself
        // before a write.
        let shared = d.clone().into_shared();
        assert_eq!(shared, d);
        assert_eq!(serde_json::to_string(&shared).unwrap(), json);
        let mut changed = shared.clone();
        changed.set("alpha", 0).unwrap();
        assert_eq!(shared, d);
        assert_eq!(changed.get("alpha"), Some(&json!(0)));
        // An invalid field name is refused as it always was.
        assert!(serde_json::from_str::<StateDelta>(r#"{"writes":{"no way":1}}"#).is_err());
    }
}
