//! `Fields`: a snapshot's fields by name, shared between snapshots.
//!
//! A superstep rewrites a field or two and keeps the snapshot it came from
//! (every waypoint holds one), so a change must not copy the whole state.
//! A persistent map guarantees that, but for the handful of fields most
//! states have, its path copy (a 16-wide node, allocated whole) costs more
//! than copying the few `(name, slot)` pairs themselves. So a small state
//! is a sorted shared slice, copied on change; past [`SMALL`] fields it
//! becomes a persistent map, whose changes cost O(log n) whatever the size.

use imbl::OrdMap;
use std::sync::Arc;

use super::FieldName;
use super::slot::Slot;

/// The most fields kept as a slice: a change then copies at most this many
/// pairs, each a name (in place, mostly) and a reference count.
const SMALL: usize = 16;

/// Where `name` is in pairs sorted by name (`Err`: where it would go).
fn search(pairs: &[(FieldName, Slot)], name: &[u8]) -> Result<usize, usize> {
    pairs.binary_search_by(|(k, _)| k.as_bytes().cmp(name))
}

/// The slot named `name` in pairs sorted by name.
fn find<'a>(pairs: &'a [(FieldName, Slot)], name: &[u8]) -> Option<&'a Slot> {
    let i = search(pairs, name).ok()?;
    pairs.get(i).map(|(_, slot)| slot)
}

#[derive(Clone)]
pub(crate) enum Fields {
    /// Sorted by name, each name once.
    Small(Arc<[(FieldName, Slot)]>),
    /// Behind an `Arc`, which a change clones only when it is shared (the
    /// map itself then, which shares its nodes): inline, the map would make
    /// every snapshot (every waypoint keeps one) a third larger.
    Large(Arc<OrdMap<FieldName, Slot>>),
}

impl Default for Fields {
    fn default() -> Self {
        Fields::Small(Arc::from([]))
    }
}

impl Fields {
    pub(crate) fn get(&self, name: &str) -> Option<&Slot> {
        match self {
            Fields::Small(pairs) => find(pairs, name.as_bytes()),
            Fields::Large(map) => map.get(name),
        }
    }

    /// [`get`](Self::get) by a name already made: no string is made of it.
    pub(crate) fn get_named(&self, name: &FieldName) -> Option<&Slot> {
        match self {
            Fields::Small(pairs) => find(pairs, name.as_bytes()),
            Fields::Large(map) => map.get(name),
        }
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Fields::Small(pairs) => pairs.len(),
            Fields::Large(map) => map.len(),
        }
    }

    /// Every field, in name order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        match self {
            Fields::Small(pairs) => Iter::Small(pairs.iter()),
            Fields::Large(map) => Iter::Large(map.iter()),
        }
    }

    /// Every field's name, in name order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &FieldName> {
        self.iter().map(|(k, _)| k)
    }

    /// Sets `name` to `slot`. Snapshots sharing these fields keep theirs.
    pub(crate) fn insert(&mut self, name: FieldName, slot: Slot) {
        let pairs = match self {
            Fields::Large(map) => {
                Arc::make_mut(map).insert(name, slot);
                return;
            }
            Fields::Small(pairs) => pairs,
        };
        // Where the new pair goes, and how many old pairs it replaces there.
        let (at, replaced) = match search(pairs, name.as_bytes()) {
            Ok(i) => {
                // Unshared (the second field a merge writes): in place.
                if let Some(unshared) = Arc::get_mut(pairs) {
                    unshared[i].1 = slot;
                    return;
                }
                (i, 1)
            }
            Err(i) if pairs.len() < SMALL => (i, 0),
            Err(_) => {
                let mut map: OrdMap<FieldName, Slot> = pairs.iter().cloned().collect();
                map.insert(name, slot);
                *self = Fields::Large(Arc::new(map));
                return;
            }
        };
        *pairs = pairs[..at]
            .iter()
            .cloned()
            .chain(std::iter::once((name, slot)))
            .chain(pairs[at + replaced..].iter().cloned())
            .collect();
    }
}

impl FromIterator<(FieldName, Slot)> for Fields {
    fn from_iter<I: IntoIterator<Item = (FieldName, Slot)>>(iter: I) -> Self {
        let mut fields = Fields::default();
        for (name, slot) in iter {
            fields.insert(name, slot);
        }
        fields
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a FieldName, &'a Slot);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The fields in name order.
pub(crate) enum Iter<'a> {
    Small(std::slice::Iter<'a, (FieldName, Slot)>),
    Large(imbl::ordmap::Iter<'a, FieldName, Slot, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a FieldName, &'a Slot);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(pairs) => pairs.next().map(|(k, v)| (k, v)),
            Iter::Large(map) => map.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn name(i: usize) -> FieldName {
        // Out of name order, so inserts land in the middle too.
        FieldName::new(format!("f{:02}", (i * 7) % 41)).unwrap()
    }

    fn value(f: &Fields, n: &FieldName) -> Option<Value> {
        f.get(n.as_str()).map(|s| s.get().clone())
    }

    #[test]
    fn reads_like_a_map_below_and_above_the_slice_limit() {
        let mut fields = Fields::default();
        let mut model = std::collections::BTreeMap::new();
        let mut snapshots = Vec::new();
        for step in 0..3 * SMALL {
            let n = name(step % (2 * SMALL));
            fields.insert(n.clone(), Slot::value(json!(step)));
            model.insert(n, json!(step));
            snapshots.push((fields.clone(), model.clone()));
            assert_eq!(
                matches!(fields, Fields::Small(_)),
                model.len() <= SMALL,
                "a slice up to {SMALL} fields, a map past it"
            );
        }
        // Every snapshot still reads as it was, in name order.
        for (snapshot, expected) in &snapshots {
            assert_eq!(snapshot.len(), expected.len());
            let got: Vec<(FieldName, Value)> = snapshot
                .iter()
                .map(|(k, v)| (k.clone(), v.get().clone()))
                .collect();
            let want: Vec<(FieldName, Value)> = expected
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want);
            for (k, v) in expected {
                assert_eq!(value(snapshot, k).as_ref(), Some(v));
            }
            assert!(!snapshot.contains_key("absent"));
        }
    }

    #[test]
    fn a_change_to_a_copy_leaves_the_original() {
        let mut a = Fields::default();
        a.insert(name(1), Slot::value(json!(1)));
        a.insert(name(2), Slot::value(json!(2)));
        let mut b = a.clone();
        b.insert(name(1), Slot::value(json!("changed")));
        b.insert(name(2), Slot::value(json!("in place")));
        assert_eq!(value(&a, &name(1)), Some(json!(1)));
        assert_eq!(value(&a, &name(2)), Some(json!(2)));
        assert_eq!(value(&b, &name(1)), Some(json!("changed")));
        assert_eq!(value(&b, &name(2)), Some(json!("in place")));
    }
}
