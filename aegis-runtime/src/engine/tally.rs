//! The run's visit counts: a tally the run reads and changes in O(1), and
//! the shared log of the same counts every waypoint it writes holds.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::index::GraphIndex;
use crate::fnv::Fnv;
use crate::id::NodeId;
use crate::waypoint::Visits;

/// How often each node has been activated in the thread.
pub(crate) struct VisitTally {
    /// By the node's position in the graph ([`GraphIndex::position`]): a
    /// superstep that has its node's entry counts without a lookup.
    by_position: Vec<u32>,
    /// Nodes the graph does not declare (only a waypoint of another graph
    /// could name one).
    others: HashMap<NodeId, u32, BuildHasherDefault<Fnv>>,
    /// The same counts, for waypoints (reading them walks a log).
    log: Visits,
}

impl VisitTally {
    /// The counts a waypoint recorded, to go on from, for the graph of
    /// `index`.
    pub(crate) fn from_visits(log: Visits, index: &GraphIndex<'_>) -> Self {
        let mut by_position = vec![0; index.positions()];
        let mut others = HashMap::default();
        for (node, count) in log.counts() {
            match index
                .position(node.as_str())
                .and_then(|p| by_position.get_mut(p))
            {
                Some(slot) => *slot = count,
                None => {
                    others.insert(node.clone(), count);
                }
            }
        }
        VisitTally {
            by_position,
            others,
            log,
        }
    }

    /// The count of `node`, at `position` when the graph declares it.
    fn count_mut(&mut self, position: Option<usize>, node: &NodeId) -> &mut u32 {
        match position.and_then(|p| self.by_position.get_mut(p)) {
            Some(count) => count,
            None => self.others.entry(node.clone()).or_insert(0),
        }
    }

    /// How often `node` has been activated (0 if never).
    pub(crate) fn get(&self, index: &GraphIndex<'_>, node: &NodeId) -> u32 {
        match index
            .position(node.as_str())
            .and_then(|p| self.by_position.get(p))
        {
            Some(count) => *count,
            None => self.others.get(node).copied().unwrap_or(0),
        }
    }

    /// Counts one more activation of `node`, found at `position` (its
    /// entry's, or [`GraphIndex::position`]'s); returns its new count.
    pub(crate) fn increment(&mut self, position: Option<usize>, node: &NodeId) -> u32 {
        let count = self.count_mut(position, node);
        *count = count.saturating_add(1);
        let count = *count;
        self.log.set(node.clone(), count);
        count
    }

    /// Takes back one activation of `node` (a parley's re-run continues the
    /// same visit).
    pub(crate) fn decrement(&mut self, index: &GraphIndex<'_>, node: &NodeId) {
        let count = self.count_mut(index.position(node.as_str()), node);
        if *count > 0 {
            *count -= 1;
            let count = *count;
            self.log.set(node.clone(), count);
        }
    }

    /// The counts as a waypoint keeps them: O(1), shared with the tally.
    pub(crate) fn snapshot(&self) -> Visits {
        self.log.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{EngineLimits, NodeSpec, WarGraph};
    use crate::id::{END, START};
    use crate::state::BattlefieldSchema;

    fn graph() -> WarGraph {
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
        g.add_node("a", NodeSpec::noop())
            .add_node("b", NodeSpec::noop())
            .add_edge(START, "a")
            .add_edge("a", "b")
            .add_edge("b", END);
        g
    }

    #[test]
    fn counts_by_position_and_by_name_agree_with_the_log() {
        let g = graph();
        let index = GraphIndex::of(&g);
        let (a, b, gone) = (NodeId::new("a"), NodeId::new("b"), NodeId::new("gone"));
        let mut tally = VisitTally::from_visits(Visits::default(), &index);
        // With the entry's position, by a lookup, or not in the graph at all.
        let at = index.node("a").map(|e| e.position);
        assert_eq!(tally.increment(at, &a), 1);
        assert_eq!(tally.increment(index.position("a"), &a), 2);
        assert_eq!(tally.increment(index.position("b"), &b), 1);
        assert_eq!(tally.increment(None, &gone), 1);
        tally.decrement(&index, &a);
        tally.decrement(&index, &gone);
        tally.decrement(&index, &gone); // never below zero
        let expected = [(&a, 1), (&b, 1), (&gone, 0)];
        for (node, count) in expected {
            assert_eq!(tally.get(&index, node), count, "{node}");
        }
        // A resumed run starts from what its waypoint recorded.
        let snapshot = tally.snapshot();
        assert_eq!(snapshot.counts(), expected.into_iter().collect());
        let resumed = VisitTally::from_visits(snapshot, &index);
        for (node, count) in expected {
            assert_eq!(resumed.get(&index, node), count, "{node}");
        }
    }
}
