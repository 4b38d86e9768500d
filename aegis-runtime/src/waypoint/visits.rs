//! `Visits`: how often each node has been activated in a thread, as every
//! waypoint records it.
//!
//! Every superstep changes a count or two and writes a waypoint holding all
//! of them, so taking a snapshot of the counts and changing them must both
//! be O(1). A persistent map is not: each change copies the map's path to
//! the changed key (three 16-wide nodes at 1,000 nodes, every key in them an
//! `Arc` clone). So the counts are a log of changes, newest last, shared by
//! every snapshot of a run: a snapshot is the log's last chunk and how much
//! of it the snapshot sees, and a change writes the next slot. Chunks link
//! backwards, so a snapshot never sees a change made after it; a change made
//! from a snapshot that is not the log's end (a fork) copies the end of the
//! last chunk instead. Counts are read by walking the log, which a run never
//! does (the engine keeps its own tally); stores and callers do it once per
//! waypoint they encode or inspect.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::id::NodeId;

/// Changes per chunk: one allocation per this many supersteps.
const CHUNK: usize = 32;

/// A thread's activation count per node. Cloning is O(1); clones share
/// everything, and a change to one never shows in another.
#[derive(Clone, Default)]
pub(crate) struct Visits {
    /// The newest chunk; `None` for no counts at all.
    tail: Option<Arc<Chunk>>,
    /// How many of the newest chunk's slots this snapshot sees.
    fill: usize,
}

/// Up to [`CHUNK`] changes, after every change of the chunks before it.
struct Chunk {
    /// Counts from before the log: on the first chunk only, when the counts
    /// were read back from a store.
    base: Option<Arc<BTreeMap<NodeId, u32>>>,
    /// The chunk before, full: every snapshot reaching this chunk sees all
    /// of it.
    older: Option<Arc<Chunk>>,
    /// `(node, its new count)`, in order; set once each.
    slots: [OnceLock<(NodeId, u32)>; CHUNK],
}

impl Chunk {
    fn new(base: Option<Arc<BTreeMap<NodeId, u32>>>, older: Option<Arc<Chunk>>) -> Self {
        Chunk {
            base,
            older,
            slots: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl Drop for Chunk {
    /// A long run's log is a long chain: free it iteratively, not by a
    /// recursion as deep as the chain.
    fn drop(&mut self) {
        let mut older = self.older.take();
        while let Some(chunk) = older {
            older = Arc::into_inner(chunk).and_then(|mut c| c.older.take());
        }
    }
}

impl Visits {
    /// Records `count` as `node`'s count.
    pub(crate) fn set(&mut self, node: NodeId, count: u32) {
        let entry = (node, count);
        let Some(tail) = &self.tail else {
            let chunk = Chunk::new(None, None);
            let _ = chunk.slots[0].set(entry);
            self.tail = Some(Arc::new(chunk));
            self.fill = 1;
            return;
        };
        if self.fill == CHUNK {
            let chunk = Chunk::new(None, Some(tail.clone()));
            let _ = chunk.slots[0].set(entry);
            self.tail = Some(Arc::new(chunk));
            self.fill = 1;
            return;
        }
        let entry = match tail.slots[self.fill].set(entry) {
            Ok(()) => {
                self.fill += 1;
                return;
            }
            // Another snapshot of this chunk wrote the slot first: this one
            // is a fork, and continues on a copy of what it sees.
            Err(entry) => entry,
        };
        let chunk = Chunk::new(tail.base.clone(), tail.older.clone());
        for (slot, seen) in chunk.slots.iter().zip(&tail.slots[..self.fill]) {
            if let Some(seen) = seen.get() {
                let _ = slot.set(seen.clone());
            }
        }
        let _ = chunk.slots[self.fill].set(entry);
        self.tail = Some(Arc::new(chunk));
        self.fill += 1;
    }

    /// Walks the changes this snapshot sees, newest first, until `visit`
    /// returns true; then hands over the base the log started from.
    fn walk<'a>(
        &'a self,
        mut visit: impl FnMut(&'a NodeId, u32) -> bool,
    ) -> Option<&'a BTreeMap<NodeId, u32>> {
        let mut base = None;
        let mut fill = self.fill;
        let mut chunk = self.tail.as_deref();
        while let Some(c) = chunk {
            for (node, count) in c.slots[..fill].iter().rev().filter_map(OnceLock::get) {
                if visit(node, *count) {
                    return None;
                }
            }
            base = c.base.as_deref();
            fill = CHUNK;
            chunk = c.older.as_deref();
        }
        base
    }

    /// Every count, by node id.
    pub(crate) fn counts(&self) -> BTreeMap<&NodeId, u32> {
        let mut counts = BTreeMap::new();
        let base = self.walk(|node, count| {
            counts.entry(node).or_insert(count);
            false
        });
        for (node, count) in base.into_iter().flatten() {
            counts.entry(node).or_insert(*count);
        }
        counts
    }

    /// How often `node` has been activated (0 if never).
    pub(crate) fn get(&self, node: &NodeId) -> u32 {
        let mut found = None;
        let base = self.walk(|n, count| {
            let hit = n == node;
            if hit {
                found = Some(count);
            }
            hit
        });
        found
            .or_else(|| base.and_then(|b| b.get(node).copied()))
            .unwrap_or(0)
    }
}

impl FromIterator<(NodeId, u32)> for Visits {
    fn from_iter<I: IntoIterator<Item = (NodeId, u32)>>(iter: I) -> Self {
        let base: BTreeMap<NodeId, u32> = iter.into_iter().collect();
        if base.is_empty() {
            return Visits::default();
        }
        Visits {
            tail: Some(Arc::new(Chunk::new(Some(Arc::new(base)), None))),
            fill: 0,
        }
    }
}

impl fmt::Debug for Visits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.counts()).finish()
    }
}

impl PartialEq for Visits {
    fn eq(&self, other: &Self) -> bool {
        self.counts() == other.counts()
    }
}

/// Stored as the map it stands for (a JSON object by node id), exactly as
/// the persistent map it replaced was.
impl Serialize for Visits {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.counts())
    }
}

impl<'de> Deserialize<'de> for Visits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let base = BTreeMap::<NodeId, u32>::deserialize(d)?;
        Ok(base.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: usize) -> NodeId {
        NodeId::new(format!("n{i:03}"))
    }

    fn owned(v: &Visits) -> Vec<(NodeId, u32)> {
        v.counts()
            .into_iter()
            .map(|(k, c)| (k.clone(), c))
            .collect()
    }

    fn model_vec(m: &BTreeMap<NodeId, u32>) -> Vec<(NodeId, u32)> {
        m.iter().map(|(k, c)| (k.clone(), *c)).collect()
    }

    #[test]
    fn every_snapshot_reads_as_it_was_when_taken() {
        let mut visits = Visits::default();
        let mut model: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut snapshots = Vec::new();
        for step in 0..300usize {
            // Revisit some nodes, visit new ones, out of key order.
            let node = n((step * 7) % 53);
            let count = model.get(&node).copied().unwrap_or(0) + 1;
            assert_eq!(visits.get(&node), count - 1);
            visits.set(node.clone(), count);
            model.insert(node, count);
            snapshots.push((visits.clone(), model.clone()));
        }
        for (snapshot, expected) in &snapshots {
            assert_eq!(owned(snapshot), model_vec(expected));
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
            a.set(n(i), 1);
        }
        // `b` and `c` fork from the same snapshot in the middle of a chunk;
        // `d` forks from an older one, whose chunk `a` filled since.
        let mut b = a.clone();
        let mut c = a.clone();
        let mut d = a.clone();
        for i in 40..45 {
            a.set(n(i), 1);
        }
        b.set(n(3), 2);
        c.set(n(3), 7);
        c.set(n(99), 1);
        for i in 0..100 {
            d.set(n(200 + i), 1);
        }
        assert_eq!((a.get(&n(3)), b.get(&n(3)), c.get(&n(3))), (1, 2, 7));
        assert_eq!((a.get(&n(99)), b.get(&n(99)), c.get(&n(99))), (0, 0, 1));
        assert_eq!(a.get(&n(42)), 1);
        assert_eq!((b.get(&n(42)), d.get(&n(42)), d.get(&n(250))), (0, 0, 1));
        assert_eq!(
            (
                a.counts().len(),
                b.counts().len(),
                c.counts().len(),
                d.counts().len()
            ),
            (45, 40, 41, 140)
        );
    }

    #[test]
    fn counts_read_back_from_a_store_go_on_from_there() {
        let mut v: Visits = [(n(1), 3), (n(2), 1)].into_iter().collect();
        v.set(n(2), 2);
        v.set(n(5), 1);
        assert_eq!(owned(&v), vec![(n(1), 3), (n(2), 2), (n(5), 1)]);
    }

    #[test]
    fn a_long_log_drops_without_a_deep_recursion() {
        let mut v = Visits::default();
        // 31,250 chunks: a recursive drop would need far more than a test
        // thread's 2 MiB of stack.
        for i in 0..1_000_000u32 {
            v.set(NodeId::new("a"), i);
        }
        assert_eq!(v.get(&NodeId::new("a")), 999_999);
        drop(v);
    }

    #[test]
    fn serialises_as_the_map_it_stands_for() {
        let mut visits = Visits::default();
        for (i, c) in [(5, 1), (1, 1), (5, 2), (3, 1)] {
            visits.set(n(i), c);
        }
        let json = serde_json::to_string(&visits).unwrap();
        assert_eq!(json, r#"{"n001":1,"n003":1,"n005":2}"#);
        let back: Visits = serde_json::from_str(&json).unwrap();
        assert_eq!(back, visits);
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }
}
