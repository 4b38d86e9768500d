//! `Visits`: how often each node has been activated in a thread, as every
//! waypoint records it.
//!
//! Every superstep changes a count or two and writes a waypoint holding all
//! of them, so the counts must be cheap to change and to keep. A persistent
//! map alone is not: each change copies the map's path to the changed key
//! (three 16-wide nodes for 1,000 nodes, every key in them cloned), and a
//! long chain pays that per superstep. So the newest changes sit in a short
//! shared list in front of the map, one small allocation each; once the list
//! is [`FOLD_AT`] long it is folded into the map in one batch, whose path
//! copies the batch's keys then share.

use imbl::OrdMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

use crate::id::NodeId;

/// How many changes the list holds before they are folded into the map:
/// a lookup walks at most this many entries.
const FOLD_AT: u32 = 16;

/// A thread's activation count per node. Cloning is O(1); clones share
/// everything, and a change to one never shows in another.
#[derive(Clone, Default)]
pub(crate) struct Visits {
    base: OrdMap<NodeId, u32>,
    /// The changes since `base`, newest first.
    recent: Option<Arc<Change>>,
}

/// One count set after `base` was built.
struct Change {
    node: NodeId,
    count: u32,
    /// How many changes this list holds, this one included.
    len: u32,
    older: Option<Arc<Change>>,
}

impl Visits {
    /// The changes since the map, newest first.
    fn changes(&self) -> impl Iterator<Item = &Change> {
        std::iter::successors(self.recent.as_deref(), |c| c.older.as_deref())
    }

    /// How often `node` has been activated (0 if never).
    pub(crate) fn get(&self, node: &NodeId) -> u32 {
        self.changes()
            .find(|c| c.node == *node)
            .map_or_else(|| self.base.get(node).copied().unwrap_or(0), |c| c.count)
    }

    /// Records `count` as `node`'s count.
    pub(crate) fn set(&mut self, node: NodeId, count: u32) {
        let len = self.recent.as_ref().map_or(0, |c| c.len);
        if len >= FOLD_AT {
            self.fold();
        }
        let older = self.recent.take();
        let len = older.as_ref().map_or(0, |c| c.len) + 1;
        self.recent = Some(Arc::new(Change {
            node,
            count,
            len,
            older,
        }));
    }

    /// Adds one activation of `node`; returns its new count.
    pub(crate) fn increment(&mut self, node: &NodeId) -> u32 {
        let count = self.get(node).saturating_add(1);
        self.set(node.clone(), count);
        count
    }

    /// Moves the list into the map, oldest change first.
    fn fold(&mut self) {
        let changes: Vec<(NodeId, u32)> = self
            .changes()
            .map(|c| (c.node.clone(), c.count))
            .collect();
        // The list may be shared with older waypoints: dropping this handle
        // frees nothing they still hold.
        self.recent = None;
        for (node, count) in changes.into_iter().rev() {
            self.base.insert(node, count);
        }
    }

    /// Every count, by node id.
    pub(crate) fn iter(&self) -> std::vec::IntoIter<(&NodeId, u32)> {
        // The newest change of each node wins.
        let mut newest: Vec<(&NodeId, u32)> = Vec::new();
        for c in self.changes() {
            if !newest.iter().any(|(n, _)| **n == c.node) {
                newest.push((&c.node, c.count));
            }
        }
        newest.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Vec::with_capacity(self.base.len() + newest.len());
        let mut base = self.base.iter().map(|(n, c)| (n, *c)).peekable();
        let mut newer = newest.into_iter().peekable();
        loop {
            let next = match (base.peek(), newer.peek()) {
                (Some(&(b, _)), Some(&(n, _))) => match b.cmp(n) {
                    std::cmp::Ordering::Less => base.next(),
                    std::cmp::Ordering::Greater => newer.next(),
                    std::cmp::Ordering::Equal => {
                        base.next();
                        newer.next()
                    }
                },
                (Some(_), None) => base.next(),
                (None, _) => newer.next(),
            };
            match next {
                Some(entry) => out.push(entry),
                None => break,
            }
        }
        out.into_iter()
    }

    /// How many nodes have a count.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.iter().len()
    }
}

impl FromIterator<(NodeId, u32)> for Visits {
    fn from_iter<I: IntoIterator<Item = (NodeId, u32)>>(iter: I) -> Self {
        Visits {
            base: iter.into_iter().collect(),
            recent: None,
        }
    }
}

impl fmt::Debug for Visits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for Visits {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

/// Stored as the map it stands for (a JSON object by node id), exactly as
/// the persistent map it replaced was.
impl Serialize for Visits {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Visits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Visits {
            base: OrdMap::deserialize(d)?,
            recent: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn n(i: usize) -> NodeId {
        NodeId::new(format!("n{i:03}"))
    }

    #[test]
    fn counts_match_a_plain_map_through_folds_and_forks() {
        let mut visits = Visits::default();
        let mut model: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut snapshots = Vec::new();
        for step in 0..200usize {
            // Revisit some nodes, visit new ones, out of key order.
            let node = n((step * 7) % 53);
            let count = visits.increment(&node);
            *model.entry(node.clone()).or_insert(0) += 1;
            assert_eq!(count, model[&node]);
            if step % 9 == 0 {
                visits.set(node.clone(), count.saturating_sub(1));
                model.insert(node, count.saturating_sub(1));
            }
            snapshots.push((visits.clone(), model.clone()));
        }
        // Every snapshot still reads as it was when taken.
        for (snapshot, expected) in &snapshots {
            let got: Vec<(NodeId, u32)> = snapshot.iter().map(|(k, v)| (k.clone(), v)).collect();
            let want: Vec<(NodeId, u32)> = expected.iter().map(|(k, v)| (k.clone(), *v)).collect();
            assert_eq!(got, want);
            assert_eq!(snapshot.len(), expected.len());
            for (node, count) in expected {
                assert_eq!(snapshot.get(node), *count);
            }
            assert_eq!(snapshot.get(&NodeId::new("never")), 0);
        }
    }

    #[test]
    fn a_fork_changes_only_itself() {
        let mut a = Visits::default();
        for i in 0..40 {
            a.increment(&n(i));
        }
        let mut b = a.clone();
        b.increment(&n(3));
        b.increment(&n(99));
        assert_eq!((a.get(&n(3)), b.get(&n(3))), (1, 2));
        assert_eq!((a.get(&n(99)), b.get(&n(99))), (0, 1));
        assert_eq!((a.len(), b.len()), (40, 41));
    }

    #[test]
    fn the_list_stays_short() {
        let mut visits = Visits::default();
        for i in 0..1_000 {
            visits.increment(&n(i % 300));
            assert!(visits.changes().count() <= FOLD_AT as usize);
        }
    }

    #[test]
    fn serialises_as_the_map_it_stands_for() {
        let mut visits = Visits::default();
        for i in [5, 1, 5, 3] {
            visits.increment(&n(i));
        }
        let json = serde_json::to_string(&visits).unwrap();
        assert_eq!(json, r#"{"n001":1,"n003":1,"n005":2}"#);
        let back: Visits = serde_json::from_str(&json).unwrap();
        assert_eq!(back, visits);
        let map: OrdMap<NodeId, u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&map).unwrap(), json);
    }
}
