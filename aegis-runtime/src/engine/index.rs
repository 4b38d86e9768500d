//! The engine's index of a graph, so each superstep looks nodes up in O(1):
//! built on a graph's first run and kept in the graph's memo until a
//! builder method changes the graph, so a `start` costs nothing per node.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::aegis::Aegis;
use crate::cache::{GraphKeySeed, KeySeed};
use crate::graph::{ConditionalEdges, NodeSpec, WarGraph};
use crate::id::{END, NodeId, START};
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
    /// Where the node's spec sits in `WarGraph::nodes`.
    position: usize,
    /// Shared: when this node alone ran and took its edges (every superstep
    /// of a chain), this is the next vanguard as it stands, so the barrier
    /// builds and allocates none.
    successors: Arc<[Activation]>,
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
    nodes: HashMap<NodeId, NodeSlot, BuildHasherDefault<Fnv>>,
    entry: Vec<NodeId>,
}

impl IndexData {
    fn build(graph: &WarGraph) -> Self {
        let mut nodes: HashMap<NodeId, NodeSlot, BuildHasherDefault<Fnv>> =
            HashMap::with_capacity_and_hasher(graph.nodes.len(), Default::default());
        let mut graph_seed: Option<GraphKeySeed> = None;
        for (position, (id, _)) in graph.nodes.iter().enumerate() {
            // A duplicate id is a validation error; the first one is indexed.
            nodes.entry(id.clone()).or_insert_with(|| {
                let aegis = graph.aegis_for(id).cloned().map(Box::new);
                let cache_seed = aegis.as_ref().and_then(|a| a.cache.as_ref()).map(|_| {
                    Box::new(
                        graph_seed
                            .get_or_insert_with(|| GraphKeySeed::new(&graph.shared_fingerprint()))
                            .node(id),
                    )
                });
                NodeSlot {
                    position,
                    successors: Arc::from([]),
                    conditionals: Box::default(),
                    aegis,
                    cache_seed,
                }
            });
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
            } else if let Some(list) = nodes
                .get(from.as_str())
                .and_then(|e| successors.get_mut(e.position))
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
            if let Some(list) = nodes
                .get(c.from.as_str())
                .and_then(|e| conditionals.get_mut(e.position))
            {
                list.push(i);
            }
        }
        for slot in nodes.values_mut() {
            let mut next = successors
                .get_mut(slot.position)
                .map(std::mem::take)
                .unwrap_or_default();
            next.sort();
            slot.successors = next.into_iter().map(Activation::node).collect();
            slot.conditionals = conditionals
                .get_mut(slot.position)
                .map(std::mem::take)
                .unwrap_or_default()
                .into();
        }
        entry.sort();
        IndexData { nodes, entry }
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
        let slot = self.data.nodes.get(id)?;
        let (_, spec) = self.graph.nodes.get(slot.position)?;
        Some(NodeEntry {
            position: slot.position,
            spec,
            cache_seed: slot.cache_seed.as_deref(),
            successors: &slot.successors,
            conditionals: &slot.conditionals,
            graph: self.graph,
            aegis: slot.aegis.as_deref(),
        })
    }

    /// The node's [`NodeEntry::position`], without the rest of its entry.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.data.nodes.get(id).map(|slot| slot.position)
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

/// FNV-1a: node ids are short and chosen by the graph's author, so a keyed
/// hash buys no protection here and costs more than the lookup it serves.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
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
