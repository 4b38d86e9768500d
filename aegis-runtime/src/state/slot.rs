//! `Slot`: how one field of a [`Battlefield`](super::Battlefield) is stored,
//! with the digest memo a cache key reads in its place.

use imbl::Vector;
use serde_json::Value;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use crate::canon::{Digest32, array_digest, inline_in_key, value_digest};

/// One field's stored value.
///
/// Lists (the `Append` dispatch) are persistent vectors of shared items, so
/// appending is O(log n) and a snapshot never deep-copies earlier items; the
/// JSON array is materialised lazily, once per snapshot, only when read.
///
/// A value a cache key encodes in place ([`inline_in_key`]: a scalar, a
/// short string, an empty container) is kept bare. Any other stored value
/// also memoises the digest of its canonical encoding ([`value_digest`]),
/// which node cache keys hash in its place: it is computed at most once per
/// stored value, the first time a key needs it, and every later snapshot
/// that did not rewrite the field shares it.
#[derive(Clone)]
pub(crate) enum Slot {
    /// No digest memo: a key never asks for one, so a counter rewritten
    /// every superstep keeps no memo in each snapshot.
    Small(Arc<Value>),
    Value(Stored),
    /// Behind one `Arc` with what it computes lazily: a slot is two words,
    /// so the (name, slot) pairs every snapshot keeps stay small.
    List(Arc<List>),
}

/// A plain stored value with its digest memo; reads as the value itself.
#[derive(Clone)]
pub(crate) struct Stored(pub(super) Arc<StoredValue>);

pub(super) struct StoredValue {
    pub(super) value: Value,
    pub(super) digest: OnceLock<Digest32>,
}

impl Deref for Stored {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.value
    }
}

/// A list's items and what it computes lazily, shared by every snapshot
/// holding it.
pub(crate) struct List {
    pub(crate) items: Vector<Arc<Value>>,
    materialized: OnceLock<Value>,
    pub(super) digest: OnceLock<Digest32>,
}

impl Slot {
    pub(crate) fn value(v: Value) -> Self {
        if inline_in_key(&v) {
            return Slot::Small(Arc::new(v));
        }
        Slot::Value(Stored(Arc::new(StoredValue {
            value: v,
            digest: OnceLock::new(),
        })))
    }

    pub(crate) fn list(items: Vector<Arc<Value>>) -> Self {
        Slot::List(Arc::new(List {
            items,
            materialized: OnceLock::new(),
            digest: OnceLock::new(),
        }))
    }

    pub(super) fn get(&self) -> &Value {
        match self {
            Slot::Small(v) => v,
            Slot::Value(v) => &v.0.value,
            Slot::List(list) => list
                .materialized
                .get_or_init(|| Value::Array(list.items.iter().map(|v| Value::clone(v)).collect())),
        }
    }

    /// [`value_digest`] of the value (hashed afresh for a small value,
    /// which a key reads in place instead).
    fn digest(&self) -> Digest32 {
        self.memo()
            .copied()
            .unwrap_or_else(|| value_digest(self.get()))
    }

    /// The memoised [`value_digest`] of the value, computed on first use;
    /// `None` for a small value, which keeps no memo. A list is hashed item
    /// by item, exactly as its materialised array would be, so a list built
    /// by appends and the same list given as input agree.
    pub(super) fn memo(&self) -> Option<&Digest32> {
        match self {
            Slot::Small(_) => None,
            Slot::Value(v) => Some(v.0.digest.get_or_init(|| value_digest(&v.0.value))),
            Slot::List(list) => {
                Some(list.digest.get_or_init(|| {
                    array_digest(list.items.len(), list.items.iter().map(|v| &**v))
                }))
            }
        }
    }
}

/// One stored field as a cache key reads it: its plain value (not a list),
/// or the memoised digest of whatever it holds.
#[derive(Clone, Copy)]
pub(crate) struct FieldPart<'a>(pub(super) &'a Slot);

impl<'a> FieldPart<'a> {
    /// The value, when it is a plain one (a list is only ever read by its
    /// digest, so it is never materialised for a key).
    pub(crate) fn plain(self) -> Option<&'a Value> {
        match self.0 {
            Slot::Small(v) => Some(v),
            Slot::Value(v) => Some(&v.0.value),
            Slot::List(_) => None,
        }
    }

    /// Whether it is a list with no items.
    pub(crate) fn is_empty_list(self) -> bool {
        matches!(self.0, Slot::List(list) if list.items.is_empty())
    }

    /// The digest of its canonical encoding, computed at most once for a
    /// value a key does not read in place.
    pub(crate) fn digest(self) -> Digest32 {
        self.0.digest()
    }
}
