//! `Battlefield`: the graph state every node reads, as shared persistent
//! values.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::FieldName;
use super::fields::Fields;
use super::slot::{FieldPart, Slot};

/// An immutable snapshot of a run's state.
///
/// Cloning is O(1) and two snapshots share every value neither changed:
/// a superstep costs in proportion to its delta, not to the whole state.
#[derive(Clone, Default)]
pub struct Battlefield {
    fields: Fields,
}

impl Battlefield {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `field`, if it is set.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).map(Slot::get)
    }

    /// Whether `field` is set.
    pub fn contains(&self, field: &str) -> bool {
        self.fields.contains_key(field)
    }

    /// The names of the set fields, in name order.
    pub fn field_names(&self) -> impl Iterator<Item = &FieldName> {
        self.fields.keys()
    }

    /// The number of items of a list (`Append`) field without materialising it.
    pub fn list_len(&self, field: &str) -> Option<usize> {
        match self.fields.get(field)? {
            Slot::List(list) => Some(list.items.len()),
            Slot::Small(v) => v.as_array().map(Vec::len),
            Slot::Value(v) => v.as_array().map(Vec::len),
        }
    }

    /// The whole snapshot as one JSON object (materialises every list).
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.get().clone()))
                .collect(),
        )
    }

    /// Whether `field` holds the very same allocation in both snapshots,
    /// i.e. a superstep that did not write it did not copy it.
    pub fn shares_field_with(&self, other: &Battlefield, field: &str) -> bool {
        match (self.fields.get(field), other.fields.get(field)) {
            (Some(Slot::Small(a)), Some(Slot::Small(b))) => Arc::ptr_eq(a, b),
            (Some(Slot::Value(a)), Some(Slot::Value(b))) => Arc::ptr_eq(&a.0, &b.0),
            (Some(Slot::List(a)), Some(Slot::List(b))) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The items appended to list field `field` since `older`, when this
    /// snapshot's list is `older`'s plus a suffix — which the persistent
    /// vectors show in O(1), without materialising either list. `None` when
    /// either snapshot does not hold `field` as a list, or the prefix differs.
    pub fn appended_since(&self, older: &Battlefield, field: &str) -> Option<Vec<Value>> {
        let (Some(Slot::List(new)), Some(Slot::List(old))) =
            (self.fields.get(field), older.fields.get(field))
        else {
            return None;
        };
        let (new, old) = (&new.items, &old.items);
        if new.len() < old.len() {
            return None;
        }
        // Appending never touches earlier items: a shared first and last
        // item means the older list is this one's prefix.
        let same = |i: usize| match (new.get(i), old.get(i)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let shares_prefix = old.is_empty() || (same(0) && same(old.len() - 1));
        if !shares_prefix {
            return None;
        }
        Some(
            new.iter()
                .skip(old.len())
                .map(|v| Value::clone(v))
                .collect(),
        )
    }

    /// How many fields are set.
    pub(crate) fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// Whether `field`'s digest has been computed (tests of what a key
    /// hashes).
    #[cfg(test)]
    pub(crate) fn digest_computed(&self, field: &str) -> bool {
        match self.fields.get(field) {
            Some(Slot::Small(_)) => false,
            Some(Slot::Value(v)) => v.0.digest.get().is_some(),
            Some(Slot::List(list)) => list.digest.get().is_some(),
            None => false,
        }
    }

    /// The memo holding the digest of `field`'s value ([`value_digest`]),
    /// computed now if it was not; `None` for a field that is not set or
    /// keeps no memo (a small value).
    #[cfg(test)]
    pub(crate) fn digest_memo(&self, field: &str) -> Option<&crate::canon::Digest32> {
        self.fields.get(field)?.memo()
    }

    /// Every set field, in name order, as a cache key reads it.
    pub(crate) fn field_parts(&self) -> impl Iterator<Item = (&FieldName, FieldPart<'_>)> {
        self.fields.iter().map(|(k, v)| (k, FieldPart(v)))
    }

    /// `field` as a cache key reads it, if it is set.
    pub(crate) fn field_part(&self, field: &str) -> Option<FieldPart<'_>> {
        self.fields.get(field).map(FieldPart)
    }

    pub(crate) fn slot(&self, field: &FieldName) -> Option<&Slot> {
        self.fields.get_named(field)
    }

    pub(crate) fn insert_slot(&mut self, field: FieldName, slot: Slot) {
        self.fields.insert(field, slot);
    }
}

impl fmt::Debug for Battlefield {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.fields.iter().map(|(k, v)| (k, v.get())))
            .finish()
    }
}

impl PartialEq for Battlefield {
    fn eq(&self, other: &Self) -> bool {
        self.fields.len() == other.fields.len()
            && self
                .fields
                .iter()
                .all(|(k, v)| other.get(k.as_str()) == Some(v.get()))
    }
}

impl Serialize for Battlefield {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.fields.len()))?;
        for (k, v) in &self.fields {
            map.serialize_entry(k, v.get())?;
        }
        map.end()
    }
}

/// Reads a snapshot from a JSON object of field values. Every value, lists
/// included, arrives as a plain value: the merge turns a plain array into a
/// persistent list on the first append, so a restored `Append` field behaves
/// exactly like one built in memory.
impl<'de> serde::Deserialize<'de> for Battlefield {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let fields = std::collections::BTreeMap::<FieldName, Value>::deserialize(d)?;
        Ok(Battlefield {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k, Slot::value(v)))
                .collect(),
        })
    }
}
