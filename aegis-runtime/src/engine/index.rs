//! A per-call index of the graph, so each superstep looks nodes up in O(1).

use std::collections::HashMap;

use crate::aegis::Aegis;
use crate::graph::{ConditionalEdges, NodeSpec, WarGraph};
use crate::id::{END, NodeId, START};
use crate::waypoint::Activation;

pub(crate) struct NodeEntry<'g> {
    pub(crate) spec: &'g NodeSpec,
    /// Static successors, END excluded, deduplicated.
    pub(crate) successors: Vec<NodeId>,
    pub(crate) conditionals: Vec<&'g ConditionalEdges>,
    pub(crate) aegis: Option<&'g Aegis>,
}

pub(crate) struct GraphIndex<'g> {
    pub(crate) graph: &'g WarGraph,
    nodes: HashMap<&'g str, NodeEntry<'g>>,
    entry: Vec<NodeId>,
}

impl<'g> GraphIndex<'g> {
    pub(crate) fn new(graph: &'g WarGraph) -> Self {
        let mut nodes: HashMap<&str, NodeEntry<'g>> = HashMap::with_capacity(graph.nodes.len());
        for (id, spec) in &graph.nodes {
            nodes.entry(id.as_str()).or_insert_with(|| NodeEntry {
                spec,
                successors: Vec::new(),
                conditionals: Vec::new(),
                aegis: graph.aegis_for(id),
            });
        }
        let mut entry = Vec::new();
        for (from, to) in &graph.edges {
            if to.as_str() == END {
                continue;
            }
            let list = if from.as_str() == START {
                &mut entry
            } else if let Some(e) = nodes.get_mut(from.as_str()) {
                &mut e.successors
            } else {
                continue;
            };
            if !list.contains(to) {
                list.push(to.clone());
            }
        }
        for c in &graph.conditional {
            if let Some(e) = nodes.get_mut(c.from.as_str()) {
                e.conditionals.push(c);
            }
        }
        entry.sort();
        GraphIndex {
            graph,
            nodes,
            entry,
        }
    }

    pub(crate) fn node(&self, id: &str) -> Option<&NodeEntry<'g>> {
        self.nodes.get(id)
    }

    pub(crate) fn entry_activations(&self) -> Vec<Activation> {
        self.entry.iter().cloned().map(Activation::node).collect()
    }
}
