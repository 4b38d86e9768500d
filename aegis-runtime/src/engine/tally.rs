//! The run's visit counts: a tally the run reads and changes in O(1), and
//! the shared log of the same counts every waypoint it writes holds.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::index::Fnv;
use crate::id::NodeId;
use crate::waypoint::Visits;

/// How often each node has been activated in the thread.
pub(crate) struct VisitTally {
    counts: HashMap<NodeId, u32, BuildHasherDefault<Fnv>>,
    /// The same counts, for waypoints (reading them walks a log).
    log: Visits,
}

impl VisitTally {
    /// The counts a waypoint recorded, to go on from, for a graph of
    /// `nodes` nodes (so a run that visits each grows no table).
    pub(crate) fn from_visits(log: Visits, nodes: usize) -> Self {
        let recorded = log.counts();
        let mut counts =
            HashMap::with_capacity_and_hasher(nodes.max(recorded.len()), Default::default());
        counts.extend(recorded.into_iter().map(|(n, c)| (n.clone(), c)));
        VisitTally { counts, log }
    }

    /// How often `node` has been activated (0 if never).
    pub(crate) fn get(&self, node: &NodeId) -> u32 {
        self.counts.get(node).copied().unwrap_or(0)
    }

    fn set(&mut self, node: &NodeId, count: u32) {
        match self.counts.get_mut(node) {
            Some(c) => *c = count,
            None => {
                self.counts.insert(node.clone(), count);
            }
        }
        self.log.set(node.clone(), count);
    }

    /// Counts one more activation of `node`; returns its new count.
    pub(crate) fn increment(&mut self, node: &NodeId) -> u32 {
        // One probe, not a read and then a write: this runs for every
        // activation, and on a large graph each probe is a cache miss.
        let count = match self.counts.get_mut(node) {
            Some(c) => {
                *c = c.saturating_add(1);
                *c
            }
            None => {
                self.counts.insert(node.clone(), 1);
                1
            }
        };
        self.log.set(node.clone(), count);
        count
    }

    /// Takes back one activation of `node` (a parley's re-run continues the
    /// same visit).
    pub(crate) fn decrement(&mut self, node: &NodeId) {
        let count = self.get(node);
        if count > 0 {
            self.set(node, count - 1);
        }
    }

    /// The counts as a waypoint keeps them: O(1), shared with the tally.
    pub(crate) fn snapshot(&self) -> Visits {
        self.log.clone()
    }
}
