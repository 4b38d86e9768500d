//! The engine's index of a graph, so each superstep looks nodes up in O(1):
//! built on a graph's first run and kept in the graph's memo until a
//! builder method changes the graph, so a `start` costs nothing per node.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use crate::cache::{GraphKeySeed, KeySeed};
use crate::fnv::Fnv;
use crate::graph::{ConditionalEdges, NodeSpec, WarGraph};
use crate::id::{END, NodeId, START};
use crate::policy::{Aegis, CacheScope};
use crate::waypoint::Activation;

/// One node as a superstep needs it.
#[derive(Clone, Copy)]
pub(crate) struct NodeEntry<'g> {
    /// Where the node sits in the graph's declaration order: a dense key
    /// for per-node tables (the visit tally).
    pub(crate) position: usize,
    pub(crate) spec: &'g NodeSpec,
    pub(crate) cache_seed: Option<&'g KeySeed>,
    /// Static successors, END excluded, as a vanguard (sorted, each once).
    pub(crate) successors: &'g Arc<[Activation]>,
    /// The position of the one static successor, when there is exactly one.
    sole_successor: Option<usize>,
    conditionals: &'g [usize],
    graph: &'g WarGraph,
    pub(crate) aegis: Option<&'g Aegis>,
}

impl<'g> NodeEntry<'g> {
    /// Whether the node declares conditional edges.
    pub(crate) fn has_conditionals(&self) -> bool {
        !self.conditionals.is_empty()
    }

    /// The node's conditional edges, in declaration order.
    pub(crate) fn conditionals(&self) -> impl Iterator<Item = &'g ConditionalEdges> + 'g {
        let graph = self.graph;
        self.conditionals
            .iter()
            .filter_map(move |&i| graph.conditional.get(i))
    }
}

/// What the index keeps of one node: owned, so the graph can keep it.
struct NodeSlot {
    /// Shared: when this node alone ran and took its edges (every superstep
    /// of a chain), this is the next vanguard as it stands, so the barrier
    /// builds and allocates none.
    successors: Arc<[Activation]>,
    /// The one successor's position, when `successors` is one declared
    /// node: the next superstep's node, found without a lookup by id.
    sole_successor: Option<usize>,
    /// Positions in `WarGraph::conditional`.
    conditionals: Box<[usize]>,
    /// The node's Aegis: its own, else the graph's default. Boxed, as is
    /// the seed: inline they made a slot about a kilobyte (the seed keeps
    /// five hash states), so a 10,000-node graph's index took 20 MB.
    aegis: Option<Box<Aegis>>,
    /// What every cache key of the node starts from, when it has a cache
    /// policy: made with the index, so a key costs only its own input.
    cache_seed: Option<Box<KeySeed>>,
}

/// The index kept in the graph's memo.
struct IndexData {
    /// Each node's position in `WarGraph::nodes` (a duplicate id's first).
    positions: HashMap<NodeId, usize, BuildHasherDefault<Fnv>>,
    /// By position; `None` at a duplicate id's later positions.
    slots: Vec<Option<NodeSlot>>,
    entry: Vec<NodeId>,
}

impl IndexData {
    fn build(graph: &WarGraph) -> Self {
        let mut positions: HashMap<NodeId, usize, BuildHasherDefault<Fnv>> =
            HashMap::with_capacity_and_hasher(graph.nodes.len(), Default::default());
        let mut slots: Vec<Option<NodeSlot>> = Vec::with_capacity(graph.nodes.len());
        let mut graph_seed: Option<GraphKeySeed> = None;
        for (position, (id, spec)) in graph.nodes.iter().enumerate() {
            // A duplicate id is a validation error; the first one is indexed.
            if positions.contains_key(id) {
                slots.push(None);
                continue;
            }
            positions.insert(id.clone(), position);
            let aegis = graph.aegis_for(id).cloned().map(Box::new);
            let cache_seed = aegis.as_ref().and_then(|a| a.cache.as_ref()).map(|policy| {
                Box::new(match policy.scope {
                    CacheScope::Node => KeySeed::node_scoped(id, spec),
                    _ => graph_seed
                        .get_or_insert_with(|| GraphKeySeed::new(&graph.shared_fingerprint()))
                        .node(id, spec),
                })
            });
            slots.push(Some(NodeSlot {
                successors: Arc::from([]),
                sole_successor: None,
                conditionals: Box::default(),
                aegis,
                cache_seed,
            }));
        }
        // Gathered by position first: a slot's lists are immutable once built.
        let mut successors: Vec<Vec<NodeId>> = vec![Vec::new(); graph.nodes.len()];
        let mut conditionals: Vec<Vec<usize>> = vec![Vec::new(); graph.nodes.len()];
        let mut entry = Vec::new();
        for (from, to) in &graph.edges {
            if to.as_str() == END {
                continue;
            }
            let list = if from.as_str() == START {
                &mut entry
            } else if let Some(list) = positions
                .get(from.as_str())
                .and_then(|&at| successors.get_mut(at))
            {
                list
            } else {
                continue;
            };
            if !list.contains(to) {
                list.push(to.clone());
            }
        }
        for (i, c) in graph.conditional.iter().enumerate() {
            if let Some(list) = positions
                .get(c.from.as_str())
                .and_then(|&at| conditionals.get_mut(at))
            {
                list.push(i);
            }
        }
        for (position, slot) in slots.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            let mut next = successors
                .get_mut(position)
                .map(std::mem::take)
                .unwrap_or_default();
            next.sort();
            slot.sole_successor = match &next[..] {
                [only] => positions.get(only.as_str()).copied(),
                _ => None,
            };
            slot.successors = next.into_iter().map(Activation::node).collect();
            slot.conditionals = conditionals
                .get_mut(position)
                .map(std::mem::take)
                .unwrap_or_default()
                .into();
        }
        entry.sort();
        IndexData {
            positions,
            slots,
            entry,
        }
    }
}

/// A graph with its index, for one `start`/`resume` call.
pub(crate) struct GraphIndex<'g> {
    pub(crate) graph: &'g WarGraph,
    data: Arc<IndexData>,
}

impl<'g> GraphIndex<'g> {
    /// The index of `graph`, built on its first run.
    pub(crate) fn of(graph: &'g WarGraph) -> Self {
        let memo = graph
            .memo
            .run_index
            .get_or_init(|| Arc::new(IndexData::build(graph)))
            .clone();
        // Only this module fills the slot, so the type always matches; were
        // it ever not to, a fresh index is still right.
        let data = memo
            .downcast::<IndexData>()
            .unwrap_or_else(|_| Arc::new(IndexData::build(graph)));
        GraphIndex { graph, data }
    }

    pub(crate) fn node(&self, id: &str) -> Option<NodeEntry<'_>> {
        self.at(*self.data.positions.get(id)?)
    }

    /// The node at `position`, when one is indexed there.
    fn at(&self, position: usize) -> Option<NodeEntry<'_>> {
        let slot = self.data.slots.get(position)?.as_ref()?;
        let (_, spec) = self.graph.nodes.get(position)?;
        Some(NodeEntry {
            position,
            spec,
            cache_seed: slot.cache_seed.as_deref(),
            successors: &slot.successors,
            sole_successor: slot.sole_successor,
            conditionals: &slot.conditionals,
            graph: self.graph,
            aegis: slot.aegis.as_deref(),
        })
    }

    /// The node of `vanguard`, a vanguard of one, when `previous` (the node
    /// that ran alone before it) is known: when `vanguard` is the very list
    /// of `previous`'s static successors, its node is found by position,
    /// not by id. Otherwise by id.
    pub(crate) fn solo_after(
        &self,
        previous: Option<NodeEntry<'_>>,
        vanguard: &Arc<[Activation]>,
    ) -> Option<NodeEntry<'_>> {
        let [only] = &vanguard[..] else {
            return None;
        };
        previous
            .filter(|p| Arc::ptr_eq(p.successors, vanguard))
            .and_then(|p| p.sole_successor)
            .and_then(|at| self.at(at))
            .or_else(|| self.node(only.node_id.as_str()))
    }

    /// The node's [`NodeEntry::position`], without the rest of its entry.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.data.positions.get(id).copied()
    }

    /// How many positions there are (the graph's declared nodes).
    pub(crate) fn positions(&self) -> usize {
        self.graph.nodes.len()
    }

    pub(crate) fn entry_activations(&self) -> Vec<Activation> {
        self.data
            .entry
            .iter()
            .cloned()
            .map(Activation::node)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::EngineLimits;
    use crate::state::BattlefieldSchema;

    #[test]
    fn built_once_per_graph_and_again_after_a_change() {
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
        g.add_node("a", NodeSpec::noop())
            .add_edge(START, "a")
            .add_edge("a", END);
        let first = GraphIndex::of(&g).data;
        assert!(Arc::ptr_eq(&first, &GraphIndex::of(&g).data));
        assert!(
            GraphIndex::of(&g)
                .node("a")
                .is_some_and(|e| e.successors.is_empty() && !e.has_conditionals())
        );
        g.add_node("c", NodeSpec::noop())
            .add_node("b", NodeSpec::noop());
        g.add_edge("a", "c").add_edge("a", "b").add_edge("a", "c");
        let second = GraphIndex::of(&g);
        assert!(!Arc::ptr_eq(&first, &second.data));
        // As a vanguard: sorted, each node once.
        assert_eq!(
            second.node("a").map(|e| e.successors.to_vec()),
            Some(vec![Activation::node("b"), Activation::node("c")])
        );
    }

    #[test]
    fn a_chain_finds_its_next_node_by_position() {
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
        g.add_node("a", NodeSpec::noop())
            .add_node("b", NodeSpec::noop())
            .add_node("c", NodeSpec::noop())
            .add_node("d", NodeSpec::noop())
            .add_edge(START, "a")
            .add_edge("a", "c")
            .add_edge("c", "b")
            .add_edge("c", "d")
            .add_edge("b", END);
        let index = GraphIndex::of(&g);
        let position = |e: Option<NodeEntry<'_>>| e.map(|e| e.position);
        let a = index.node("a");
        let after_a = a.map(|a| a.successors.clone()).unwrap();
        // a's successor list itself: c, by position; the same by id.
        assert_eq!(position(index.solo_after(a, &after_a)), Some(2));
        assert_eq!(position(index.solo_after(None, &after_a)), Some(2));
        // Any other list is looked up by its node's id: an equal copy, and
        // one naming another node (never taken for a's successor).
        let copy: Arc<[Activation]> = Arc::from([Activation::node("c")]);
        assert_eq!(position(index.solo_after(a, &copy)), Some(2));
        let other: Arc<[Activation]> = Arc::from([Activation::node("b")]);
        assert_eq!(position(index.solo_after(a, &other)), Some(1));
        // c has two successors: no sole one, and a vanguard of two has no solo.
        let c = index.node("c");
        assert_eq!(c.and_then(|c| c.sole_successor), None);
        let after_c = c.map(|c| c.successors.clone()).unwrap();
        assert!(index.solo_after(c, &after_c).is_none());
        // b ends the run: its list is empty.
        let b = index.node("b");
        assert!(b.is_some_and(|b| b.successors.is_empty() && b.sole_successor.is_none()));
    }

    #[test]
    fn a_slot_stays_small() {
        // Inline, the Aegis and the key seed made a slot about a kilobyte,
        // so a 10,000-node graph's index took 20 MB and its probes missed
        // the cache; boxed, a slot is its position, two lists and two
        // pointers.
        assert!(
            std::mem::size_of::<NodeSlot>() <= 80,
            "{}",
            std::mem::size_of::<NodeSlot>()
        );
    }
}
