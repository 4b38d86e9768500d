//! Key seeds: what every key of one graph, or of one node, starts from,
//! derived once and reused by each key.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use super::text::{CACHE_KEY_VERSION, CacheKey, SCOPE_BYTES, prefix_text};
use crate::canon::Canon;
use crate::graph::NodeSpec;
use crate::id::NodeId;
use crate::policy::CacheScope;

/// The domain of the key digest's stream.
const KEY_DOMAIN: &str = "aegis-node-cache/key";

/// Follows the version in a node-scoped seed's stream where a graph-scoped
/// one has the graph fingerprint (a string): the two never coincide.
const NODE_SCOPED: u64 = 1;

/// The labels continuing a seed's stream into its scope segment; a key's
/// own stream continues with a node id or a numeric code, never a label.
const GRAPH_SCOPE: &str = "graph-scope";
const NODE_SCOPE: &str = "node-scope";

/// What every graph-scoped key of one graph starts from, computed once per
/// graph (per fingerprint) rather than once per key: the key text's first
/// segment (`v4:{graph}:`) and the key digest's stream already fed with its
/// domain, the key version and the graph fingerprint, padded to a block
/// boundary.
///
/// The scope segments are digests of the same stream continued by a label,
/// so a graph costs one pass over its fingerprint and a node one block.
#[derive(Clone)]
pub(crate) struct GraphKeySeed {
    /// The graph's scope segment, as bytes.
    scope: [u8; SCOPE_BYTES],
    canon: Canon,
}

impl GraphKeySeed {
    /// The seed of every graph-scoped key of the graph with this
    /// fingerprint.
    pub(crate) fn new(graph_fingerprint: &str) -> GraphKeySeed {
        let mut canon = Canon::new(KEY_DOMAIN);
        canon.str(CACHE_KEY_VERSION).str(graph_fingerprint).align();
        let scope = scope(&canon, GRAPH_SCOPE);
        GraphKeySeed { scope, canon }
    }

    /// The seed of `node_id`'s graph-scoped keys in this graph, where the
    /// node is `spec`: the stream goes on with the node id and the node's
    /// code version (the graph fingerprint covers the rest of the node).
    pub(crate) fn node(&self, node_id: &NodeId, spec: &NodeSpec) -> KeySeed {
        let (node, mut canon) = node_segment(&self.canon, node_id);
        code_version(&mut canon, spec);
        let config = paladin_config(spec);
        KeySeed::finish(
            [self.scope, node],
            canon,
            node_id,
            CacheScope::Graph,
            config,
        )
    }
}

impl fmt::Debug for GraphKeySeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphKeySeed")
            .field("prefix", &prefix_text(&[&self.scope]))
            .finish_non_exhaustive()
    }
}

/// The root of every node-scoped key's stream: the domain, the key version
/// and the node-scope marker, where a graph-scoped stream has the graph
/// fingerprint.
fn node_scope_root() -> Canon {
    let mut canon = Canon::new(KEY_DOMAIN);
    canon.str(CACHE_KEY_VERSION).u64(NODE_SCOPED).align();
    canon
}

/// `root` continued by the node id, and the node's scope segment read from
/// it: the segment depends on the root and the id alone, so a prefix for
/// the node needs nothing else of it.
fn node_segment(root: &Canon, node_id: &NodeId) -> ([u8; SCOPE_BYTES], Canon) {
    let mut canon = root.clone();
    canon.str(node_id.as_str());
    (scope(&canon, NODE_SCOPE), canon)
}

/// The node's code version ([`StateNode::code_version`](crate::graph::StateNode::code_version)),
/// or its absence: a Function node's; other kinds have none.
fn code_version(canon: &mut Canon, spec: &NodeSpec) {
    match spec {
        NodeSpec::Function(node) => match node.code_version() {
            Some(version) => canon.str(version),
            None => canon.absent(),
        },
        _ => canon.absent(),
    };
}

/// A node's own shape, as a node-scoped key covers it in place of the
/// graph fingerprint: its kind and, for a Function node, its kind name and
/// code version; for a Paladin node, its configuration fingerprint, input
/// template, output field and output schema.
fn node_shape(canon: &mut Canon, spec: &NodeSpec, paladin_config: Option<&str>) {
    match spec {
        NodeSpec::Function(node) => {
            canon.str("function").str(node.kind_name());
            code_version(canon, spec);
        }
        NodeSpec::Paladin {
            paladin,
            input,
            output_field,
            output_schema,
        } => {
            let config = match paladin_config {
                Some(config) => Cow::Borrowed(config),
                None => Cow::Owned(paladin.config_fingerprint()),
            };
            canon
                .str("paladin")
                .str(&config)
                .str(input.template())
                .str(output_field.as_str())
                .serialize(output_schema);
        }
        // Never cached (a key of theirs is an error); named for completeness.
        NodeSpec::Battalion { .. } => {
            canon.str("battalion");
        }
        NodeSpec::Gate { .. } => {
            canon.str("gate");
        }
    }
}

/// A scope segment's bytes: the first [`SCOPE_BYTES`] of the digest of
/// `stream` continued by `label`.
fn scope(stream: &Canon, label: &str) -> [u8; SCOPE_BYTES] {
    let mut scope = stream.clone();
    scope.str(label);
    let mut bytes = [0u8; SCOPE_BYTES];
    bytes.copy_from_slice(&scope.digest()[..SCOPE_BYTES]);
    bytes
}

/// What every key of one node starts from, computed once per graph and
/// node rather than once per key: the key's text prefix
/// (`v4:{graph}:{node}:`) and the key digest's stream already fed with
/// everything but the activation's own input, padded to a block boundary
/// so a short key costs one compression. That stream is, after the domain
/// and the key version:
///
/// - graph scope: the graph fingerprint, the node id and the node's code
///   version;
/// - node scope: the node-scope marker, the node id and the node's shape
///   (kind, kind name and code version; a Paladin node's configuration,
///   input template, output field and output schema).
///
/// A seed belongs to one node (and, graph-scoped, to one graph): it keeps
/// a Paladin node's configuration fingerprint, which every key repeats.
#[derive(Clone)]
pub(crate) struct KeySeed {
    /// The key's two scope segments, as bytes: every key of the node
    /// carries them.
    pub(super) scopes: [u8; SCOPE_BYTES * 2],
    canon: Canon,
    pub(super) node: NodeId,
    scope: CacheScope,
    pub(super) paladin_config: Option<String>,
    /// `canon` continued by each input code and aligned again, made on
    /// first use: a node's keys all use one code, so each key's own input
    /// starts on a fresh block and a small one costs one compression.
    inputs: [OnceLock<Canon>; 4],
}

impl KeySeed {
    /// The seed of `node_id`'s keys in `scope`, the node being `spec` (in
    /// the graph with this fingerprint, for [`CacheScope::Graph`];
    /// [`GraphKeySeed::node`] reuses the graph's part for every node).
    pub(crate) fn new(
        scope: CacheScope,
        graph_fingerprint: &str,
        node_id: &NodeId,
        spec: &NodeSpec,
    ) -> KeySeed {
        match scope {
            CacheScope::Node => KeySeed::node_scoped(node_id, spec),
            _ => GraphKeySeed::new(graph_fingerprint).node(node_id, spec),
        }
    }

    /// The seed of `node_id`'s node-scoped keys, the node being `spec`.
    pub(crate) fn node_scoped(node_id: &NodeId, spec: &NodeSpec) -> KeySeed {
        let root = node_scope_root();
        let graph = scope(&root, GRAPH_SCOPE);
        let (node, mut canon) = node_segment(&root, node_id);
        let config = paladin_config(spec);
        node_shape(&mut canon, spec, config.as_deref());
        KeySeed::finish([graph, node], canon, node_id, CacheScope::Node, config)
    }

    /// The seed of a node's stream `canon` (aligned here) and its scope
    /// segments `[graph, node]`.
    fn finish(
        [graph, node]: [[u8; SCOPE_BYTES]; 2],
        mut canon: Canon,
        node_id: &NodeId,
        scope: CacheScope,
        paladin_config: Option<String>,
    ) -> KeySeed {
        canon.align();
        let mut scopes = [0u8; SCOPE_BYTES * 2];
        scopes[..SCOPE_BYTES].copy_from_slice(&graph);
        scopes[SCOPE_BYTES..].copy_from_slice(&node);
        KeySeed {
            scopes,
            canon,
            node: node_id.clone(),
            scope,
            paladin_config,
            inputs: Default::default(),
        }
    }

    /// The scope the seed's keys are in.
    pub(crate) fn scope(&self) -> CacheScope {
        self.scope
    }

    /// The text every key of this node starts with: `v4:{graph}:{node}:`.
    fn prefix(&self) -> String {
        let (graph, node) = self.scopes.split_at(SCOPE_BYTES);
        prefix_text(&[graph, node])
    }

    /// The stream every key of this node with input `code` continues.
    pub(super) fn input(&self, code: u64) -> &Canon {
        let slot = usize::try_from(code - 1).unwrap_or(0) % self.inputs.len();
        self.inputs[slot].get_or_init(|| {
            let mut c = self.canon.clone();
            c.u64(code).align();
            c
        })
    }
}

/// A Paladin node's configuration fingerprint; `None` for other kinds.
fn paladin_config(spec: &NodeSpec) -> Option<String> {
    match spec {
        NodeSpec::Paladin { paladin, .. } => Some(paladin.config_fingerprint()),
        _ => None,
    }
}

impl fmt::Debug for KeySeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySeed")
            .field("prefix", &self.prefix())
            .field("node", &self.node)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The prefixes that drop a graph's or a node's entries: each is the
/// scope segments of a seed, so they live with the seeds.
impl CacheKey {
    /// The prefix every graph-scoped key of the graph with this
    /// fingerprint starts with (node-scoped keys belong to no graph: see
    /// [`CacheKey::node_scope_prefix`]).
    pub fn graph_prefix(graph_fingerprint: &str) -> String {
        prefix_text(&[&GraphKeySeed::new(graph_fingerprint).scope])
    }

    /// The prefix every graph-scoped key of `node_id` in the graph with
    /// this fingerprint starts with, whatever the node's code version.
    pub fn node_prefix(graph_fingerprint: &str, node_id: &NodeId) -> String {
        let root = GraphKeySeed::new(graph_fingerprint);
        let (node, _) = node_segment(&root.canon, node_id);
        prefix_text(&[&root.scope, &node])
    }

    /// The prefix every node-scoped key ([`CacheScope::Node`]) of `node_id`
    /// starts with, whatever graph stored it and whatever the node's code
    /// version, configuration or input: `v4:{node scope}:{node}:`.
    ///
    /// ```
    /// use aegis_runtime::cache::CacheKey;
    /// use aegis_runtime::id::NodeId;
    ///
    /// let node = NodeId::new("answer");
    /// let prefix = CacheKey::node_scope_prefix(&node);
    /// assert!(prefix.starts_with("v4:"));
    /// assert_ne!(prefix, CacheKey::node_scope_prefix(&NodeId::new("other")));
    /// // No graph's keys start with it.
    /// assert!(!prefix.starts_with(&CacheKey::graph_prefix("v7:any-graph")));
    /// ```
    pub fn node_scope_prefix(node_id: &NodeId) -> String {
        let root = node_scope_root();
        let graph = scope(&root, GRAPH_SCOPE);
        let (node, _) = node_segment(&root, node_id);
        prefix_text(&[&graph, &node])
    }
}
