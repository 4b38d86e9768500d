//! Node cache keys: a versioned SHA-256 digest of everything that decides a
//! node's result.

use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::canon::{Canon, Digest32, inline_in_key, write_hex};
use crate::graph::{NodeSpec, TemplateError};
use crate::id::NodeId;
use crate::policy::{CacheKeySpec, CacheScope};
use crate::state::{Battlefield, FieldName, FieldPart};

/// The key scheme's version, the first segment of every [`CacheKey`].
///
/// Bumped whenever the encoding below changes, so entries written under an
/// older scheme can never be read under a newer one. `v3` hashes each
/// state field's value as the digest of its canonical encoding, where `v2`
/// hashed the encoding itself. `v4` adds the node's code version to every
/// key, the node scope ([`CacheScope::Node`]: keys seeded by the node's own
/// shape instead of the graph fingerprint) and the engine's cache
/// namespace: a `v3` entry was keyed without the node's code, so serving it
/// could hand a changed node its old answer.
pub const CACHE_KEY_VERSION: &str = "v4";

/// The domain of the key digest's stream.
const KEY_DOMAIN: &str = "aegis-node-cache/key";

/// What the rest of a key's stream encodes, one code each: a number costs
/// fewer bytes to hash than a label, and a key that fits one SHA-256 block
/// after its seed costs one compression.
const PALADIN_INPUT: u64 = 1;
const PALADIN_INPUT_AND_FIELDS: u64 = 2;
const FUNCTION_SNAPSHOT: u64 = 3;
const FUNCTION_FIELDS: u64 = 4;
/// Opens a key's own stream when the engine has a cache namespace: no
/// input begins with a number, so a namespaced key's stream is never an
/// un-namespaced one's.
const NAMESPACE: u64 = 5;
/// Follows the version in a node-scoped seed's stream where a graph-scoped
/// one has the graph fingerprint (a string): the two never coincide.
const NODE_SCOPED: u64 = 1;

/// How many hex digits of a digest the scoping segments of a key keep. They
/// only scope invalidation; uniqueness rests on the full digest.
const SCOPE_HEX: usize = 16;

/// A key's text length: `v4:`, two scopes and their colons, the digest.
const KEY_TEXT_LEN: usize = CACHE_KEY_VERSION.len() + 1 + 2 * (SCOPE_HEX + 1) + 64;

/// The labels continuing a seed's stream into its scope segment; a key's
/// own stream continues with a node id or a numeric code, never a label.
const GRAPH_SCOPE: &str = "graph-scope";
const NODE_SCOPE: &str = "node-scope";

/// The key one node activation's result is cached under.
///
/// Its text is `v4:{graph}:{node}:{digest}`, and `digest` is the full
/// SHA-256 of every key component. For a graph-scoped key
/// ([`CacheScope::Graph`]) `graph` and `node` are short digests of the
/// graph fingerprint and of the node id within it, so
/// [`NodeCache::invalidate_prefix`](super::NodeCache::invalidate_prefix) with
/// [`CacheKey::graph_prefix`] or [`CacheKey::node_prefix`] drops one graph's
/// or one node's entries (of every code version and namespace). A
/// node-scoped key ([`CacheScope::Node`]) belongs to no graph: its `graph`
/// segment is one constant that no graph's is, and its `node` segment a
/// digest of the node id, so [`CacheKey::node_scope_prefix`] drops a node's
/// node-scoped entries whatever graph stored them. Only hex digits, `v` and
/// `:` ever appear, so a key is safe in a Redis key and in a `SCAN MATCH`
/// pattern.
///
/// A derived key is kept as its 48 bytes, not its text: a lookup in an
/// in-process backend hashes and compares those, and the text is written
/// out only for a backend that stores text (Redis), an entry's stored form
/// and logs ([`CacheKey::text`], `Display`). Keys compare, hash and order as
/// their text would tell them apart: a key read back from text is the same
/// key.
#[derive(Clone, PartialEq, Eq)]
pub struct CacheKey(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// A key of this scheme: the two scopes and the digest, as bytes.
    Derived {
        scopes: [u8; SCOPE_BYTES * 2],
        digest: Digest32,
    },
    /// Any other text: an older scheme's key, or one a test planted. Never
    /// the text of a `Derived` key ([`CacheKey::from_raw`] parses those),
    /// so equal keys always have the same representation.
    Text(Arc<str>),
}

/// How many bytes of a digest each scoping segment keeps.
const SCOPE_BYTES: usize = SCOPE_HEX / 2;

impl CacheKey {
    /// The key's text, written out for a derived key (see the type's docs).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Text(text) => Cow::Borrowed(text),
            Repr::Derived { .. } => Cow::Owned(self.to_string()),
        }
    }

    /// Whether the key's text starts with `prefix` (as
    /// [`NodeCache::invalidate_prefix`](super::NodeCache::invalidate_prefix)
    /// matches keys), without allocating.
    pub fn starts_with(&self, prefix: &str) -> bool {
        let mut buf = [0u8; KEY_TEXT_LEN];
        self.with_text(&mut buf, |text| text.starts_with(prefix))
    }

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

    /// A key from its text, as an entry records it (and as tests plant it):
    /// the text of a derived key gives that key back.
    pub(crate) fn from_raw(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        match parse_derived(&raw) {
            Some((scopes, digest)) => CacheKey(Repr::Derived { scopes, digest }),
            None => CacheKey(Repr::Text(Arc::from(raw))),
        }
    }

    /// Calls `f` with the key's text, written into `buf` for a derived key.
    fn with_text<R>(&self, buf: &mut [u8; KEY_TEXT_LEN], f: impl FnOnce(&str) -> R) -> R {
        match &self.0 {
            Repr::Text(text) => f(text),
            Repr::Derived { scopes, digest } => {
                let (graph, node) = scopes.split_at(SCOPE_BYTES);
                let mut at = write_prefix(buf, &[graph, node]);
                at += write_hex(&mut buf[at..], digest);
                // Every byte written is ASCII, so this never falls back.
                f(std::str::from_utf8(&buf[..at]).unwrap_or_default())
            }
        }
    }
}

/// Writes `v4:` and each scope's hex followed by `:` (the text every key of
/// those scopes starts with) at the start of `buf`; returns its length.
fn write_prefix(buf: &mut [u8; KEY_TEXT_LEN], scopes: &[&[u8]]) -> usize {
    let version = CACHE_KEY_VERSION.len();
    buf[..version].copy_from_slice(CACHE_KEY_VERSION.as_bytes());
    buf[version] = b':';
    let mut at = version + 1;
    for scope in scopes {
        at += write_hex(&mut buf[at..], scope);
        buf[at] = b':';
        at += 1;
    }
    at
}

/// [`write_prefix`] as a string.
fn prefix_text(scopes: &[&[u8]]) -> String {
    let mut buf = [0u8; KEY_TEXT_LEN];
    let len = write_prefix(&mut buf, scopes);
    // Every byte written is ASCII, so this never falls back.
    std::str::from_utf8(&buf[..len])
        .unwrap_or_default()
        .to_string()
}

/// The scopes and digest of `text`, when it is a derived key's text exactly
/// (lowercase hex, this version): `v4:{16 hex}:{16 hex}:{64 hex}`.
fn parse_derived(text: &str) -> Option<([u8; SCOPE_BYTES * 2], Digest32)> {
    let rest = text.strip_prefix(CACHE_KEY_VERSION)?.strip_prefix(':')?;
    let mut parts = rest.split(':');
    let (graph, node, digest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let mut scopes = [0u8; SCOPE_BYTES * 2];
    let mut out = [0u8; 32];
    read_hex(graph, &mut scopes[..SCOPE_BYTES])?;
    read_hex(node, &mut scopes[SCOPE_BYTES..])?;
    read_hex(digest, &mut out)?;
    Some((scopes, out))
}

/// Fills `out` from exactly `2 * out.len()` lowercase hex digits.
fn read_hex(text: &str, out: &mut [u8]) -> Option<()> {
    let digits = text.as_bytes();
    if digits.len() != out.len() * 2 {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (value(pair[0])? << 4) | value(pair[1])?;
    }
    Some(())
}

impl std::hash::Hash for CacheKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match &self.0 {
            // The digest is uniform: its first 16 bytes tell keys apart as
            // well as the whole text, at a fraction of the hashing. Keys
            // equal by `Eq` have equal bytes, so equal hashes.
            Repr::Derived { digest, .. } => state.write(&digest[..16]),
            Repr::Text(text) => text.hash(state),
        }
    }
}

impl PartialOrd for CacheKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CacheKey {
    /// By text, whatever the representation.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (mut a, mut b) = ([0u8; KEY_TEXT_LEN], [0u8; KEY_TEXT_LEN]);
        self.with_text(&mut a, |x| other.with_text(&mut b, |y| x.cmp(y)))
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; KEY_TEXT_LEN];
        self.with_text(&mut buf, |text| f.write_str(text))
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({self})")
    }
}

/// Why no key could be derived for an activation.
///
/// The engine treats it as a miss that is not stored: the node runs (and
/// reports its own input problem) exactly as it would uncached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheKeyError {
    /// A Paladin node's input template does not render from the snapshot.
    #[error("no cache key for node `{node}`: its input does not render: {source}")]
    InputNotRendered {
        /// The node.
        node: NodeId,
        /// The template's error.
        source: TemplateError,
    },
    /// The node's kind cannot be cached (validation rejects such policies).
    #[error("node `{node}` is a {kind} node, which cannot be cached")]
    UnsupportedNodeKind {
        /// The node.
        node: NodeId,
        /// Its kind.
        kind: crate::graph::NodeKind,
    },
}

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
    scopes: [u8; SCOPE_BYTES * 2],
    canon: Canon,
    node: NodeId,
    scope: CacheScope,
    paladin_config: Option<String>,
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
    fn input(&self, code: u64) -> &Canon {
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

/// Derives the graph-scoped cache key of one activation of `node_id`, with
/// no namespace.
///
/// The digest covers, in a canonical length-prefixed encoding: the key
/// version, the graph fingerprint, the node id, the node's code version
/// (a Function node's [`StateNode::code_version`](crate::graph::StateNode::code_version),
/// when it has one), the node's input and, when the activation is a
/// mustered task, its `task_key` and payload. (The engine also derives
/// node-scoped keys, which cover the node's own shape in place of the graph
/// fingerprint, and adds its cache namespace: see [`CacheScope`].) The
/// input is:
///
/// - for a Paladin node, its rendered [`InputMapping`](crate::graph::InputMapping)
///   and [`Paladin::config_fingerprint`](crate::paladin::Paladin::config_fingerprint)
///   (model, system prompt, temperature, max_loops, stop words, tools), plus,
///   under [`CacheKeySpec::Fields`], the named fields' values;
/// - for a Function node, the whole snapshot under [`CacheKeySpec::Default`],
///   or only the named fields' values under [`CacheKeySpec::Fields`].
///
/// A state field enters the digest as its name and the SHA-256 of its
/// value's canonical encoding (objects by sorted key, numbers by value, so
/// `1`, `1.0` and `1e0` agree, whatever serde_json features the build
/// enables). That digest is memoised on the stored value: a snapshot hashes
/// each value at most once, and later snapshots that did not rewrite a field
/// reuse its digest, so a key costs in proportion to what changed. A
/// scalar no longer than a digest (`null`, a boolean, a number, a string of
/// at most 32 bytes) enters as its canonical encoding instead: hashing it
/// apart would cost a SHA-256 block to shorten it by nothing.
///
/// A named field that is not set is encoded as absent, distinct from `null`.
/// The same field set named in any order, or repeated, gives the same key.
///
/// The key's text is `v4:{graph}:{node}:{digest}` ([`CacheKey`]).
///
/// ```
/// use aegis_runtime::__internal::{derive_key, initial_state};
/// use aegis_runtime::graph::{InputMapping, NodeSpec};
/// use aegis_runtime::id::NodeId;
/// use aegis_runtime::paladin::Paladin;
/// use aegis_runtime::policy::CacheKeySpec;
/// use aegis_runtime::state::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec};
/// use serde_json::json;
///
/// let question = FieldName::new("question")?;
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     question.clone(), DispatchRule::LastWrite, None, false,
/// )]);
/// let spec = NodeSpec::paladin(
///     Paladin::new("Answerer").with_model("gpt-4o"),
///     InputMapping::new("Answer: {question}"),
///     FieldName::new("answer")?,
/// );
/// let state = initial_state(&schema, &json!({"question": "why?"}))?;
/// let key = |state: &Battlefield| {
///     derive_key("v6:graph", &NodeId::new("answerer"), &spec,
///                &CacheKeySpec::Fields(vec![question.clone()]), state, None)
/// };
/// assert_eq!(key(&state)?, key(&state)?);
/// assert!(key(&state)?.text().starts_with("v4:"));
/// let other = initial_state(&schema, &json!({"question": "how?"}))?;
/// assert_ne!(key(&state)?, key(&other)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(hidden)]
pub fn derive_key(
    graph_fingerprint: &str,
    node_id: &NodeId,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    state: &Battlefield,
    task: Option<(&str, &Value)>,
) -> Result<CacheKey, CacheKeyError> {
    let seed = KeySeed::new(CacheScope::Graph, graph_fingerprint, node_id, spec);
    derive_key_seeded(&seed, spec, key, state, task, None)
}

/// [`derive_key`] from the node's [`KeySeed`], which names the node and
/// its scope, in the cache `namespace` (none: `None`): the key without
/// re-deriving what every key of the node shares. A namespace costs a key
/// its few bytes; without one, a key costs what it did before namespaces.
pub(crate) fn derive_key_seeded(
    seed: &KeySeed,
    spec: &NodeSpec,
    key: &CacheKeySpec,
    state: &Battlefield,
    task: Option<(&str, &Value)>,
    namespace: Option<&str>,
) -> Result<CacheKey, CacheKeyError> {
    let node_id = &seed.node;
    let code = match (spec, key) {
        (NodeSpec::Paladin { .. }, CacheKeySpec::Default) => PALADIN_INPUT,
        (NodeSpec::Paladin { .. }, CacheKeySpec::Fields(_)) => PALADIN_INPUT_AND_FIELDS,
        (_, CacheKeySpec::Default) => FUNCTION_SNAPSHOT,
        (_, CacheKeySpec::Fields(_)) => FUNCTION_FIELDS,
    };
    let mut h = seed.input(code).clone();
    if let Some(namespace) = namespace {
        h.u64(NAMESPACE).str(namespace);
    }

    match spec {
        NodeSpec::Battalion { .. } | NodeSpec::Gate { .. } => {
            return Err(CacheKeyError::UnsupportedNodeKind {
                node: node_id.clone(),
                kind: spec.kind(),
            });
        }
        NodeSpec::Paladin { paladin, input, .. } => {
            let rendered = input.render_task(state, task).map_err(|source| {
                CacheKeyError::InputNotRendered {
                    node: node_id.clone(),
                    source,
                }
            })?;
            let config = match &seed.paladin_config {
                Some(config) => Cow::Borrowed(config.as_str()),
                // A seed made for another kind of node: never the engine's.
                None => Cow::Owned(paladin.config_fingerprint()),
            };
            debug_assert_eq!(
                *config,
                paladin.config_fingerprint(),
                "a KeySeed serves one node"
            );
            match key {
                CacheKeySpec::Default => {
                    h.str(&config).str(&rendered);
                }
                CacheKeySpec::Fields(fields) => {
                    h.str(&config).str(&rendered);
                    hash_fields(&mut h, fields, state);
                }
            }
        }
        NodeSpec::Function(_) => match key {
            CacheKeySpec::Default => {
                // Every set field in name order, each by its memoised
                // digest: unchanged fields are not re-read.
                h.count(state.field_count());
                for (name, part) in state.field_parts() {
                    h.str(name.as_str());
                    key_part(&mut h, part);
                }
            }
            CacheKeySpec::Fields(fields) => hash_fields(&mut h, fields, state),
        },
    }

    // Absent and a task's key are told apart by their tags.
    match task {
        None => h.absent(),
        Some((task_key, payload)) => h.str(task_key).json(payload),
    };

    Ok(CacheKey(Repr::Derived {
        scopes: seed.scopes,
        digest: h.digest(),
    }))
}

fn hash_fields(h: &mut Canon, fields: &[FieldName], state: &Battlefield) {
    let mut names: Vec<&str> = fields.iter().map(FieldName::as_str).collect();
    names.sort_unstable();
    names.dedup();
    h.count(names.len());
    for name in names {
        h.str(name);
        match state.field_part(name) {
            Some(part) => key_part(h, part),
            None => {
                h.absent();
            }
        }
    }
}

/// A field's value in a key: in place when [`inline_in_key`], else by its
/// memoised digest.
fn key_part(h: &mut Canon, part: FieldPart<'_>) {
    match part.plain() {
        Some(value) if inline_in_key(value) => h.json(value),
        // An empty list encodes as the empty array it reads as.
        None if part.is_empty_list() => h.json(&Value::Array(Vec::new())),
        _ => h.digest32(&part.digest()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StateNodeError;
    use crate::graph::NodeContext;
    use crate::graph::Paladin;
    use crate::graph::{Directive, InputMapping, StateNode};
    use crate::state::{BattlefieldSchema, DispatchRule, FieldSpec, initial_state};
    use serde_json::json;

    struct Noop;
    #[async_trait::async_trait]
    impl StateNode for Noop {
        fn kind_name(&self) -> &str {
            "noop"
        }

        async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
            Ok(Directive::edges(crate::state::StateDelta::new()))
        }
    }

    /// A Function node of kind `kind` whose code has version `version`.
    struct Versioned {
        kind: &'static str,
        version: Option<&'static str>,
    }
    #[async_trait::async_trait]
    impl StateNode for Versioned {
        fn kind_name(&self) -> &str {
            self.kind
        }

        fn code_version(&self) -> Option<&str> {
            self.version
        }

        async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
            Ok(Directive::edges(crate::state::StateDelta::new()))
        }
    }

    fn versioned(kind: &'static str, version: Option<&'static str>) -> NodeSpec {
        NodeSpec::function(Versioned { kind, version })
    }

    /// A key of `node` in `scope` (graph-scoped keys in the graph `fp`),
    /// in `namespace`.
    fn scoped(
        (scope, fp, namespace): (CacheScope, &str, Option<&str>),
        node: &str,
        spec: &NodeSpec,
        key: &CacheKeySpec,
        st: &Battlefield,
        task: Option<(&str, &Value)>,
    ) -> CacheKey {
        let seed = KeySeed::new(scope, fp, &NodeId::new(node), spec);
        derive_key_seeded(&seed, spec, key, st, task, namespace).unwrap()
    }

    /// A node-scoped key of `answerer`'s Default key over `st`.
    fn nkey(spec: &NodeSpec, st: &Battlefield) -> CacheKey {
        scoped(
            (CacheScope::Node, FP, None),
            "answerer",
            spec,
            &CacheKeySpec::Default,
            st,
            None,
        )
    }

    fn f(name: &str) -> FieldName {
        FieldName::new(name).unwrap()
    }

    fn state(input: Value) -> Battlefield {
        let schema = BattlefieldSchema::new(
            ["question", "context", "other", "log"]
                .iter()
                .map(|n| {
                    let rule = if *n == "log" {
                        DispatchRule::Append
                    } else {
                        DispatchRule::LastWrite
                    };
                    FieldSpec::new(f(n), rule, None, false)
                })
                .collect(),
        );
        initial_state(&schema, &input).unwrap()
    }

    fn paladin_spec(template: &str, model: &str) -> NodeSpec {
        NodeSpec::paladin(
            Paladin::new("Answerer").with_model(model),
            InputMapping::new(template),
            f("answer"),
        )
    }

    fn function_spec() -> NodeSpec {
        NodeSpec::function(Noop)
    }

    const FP: &str = "v6:graph-a";

    fn base() -> Battlefield {
        state(json!({"question": "why?", "context": "ctx", "other": 1}))
    }

    fn pkey(spec: &NodeSpec, key: &CacheKeySpec, st: &Battlefield) -> CacheKey {
        derive_key(FP, &NodeId::new("answerer"), spec, key, st, None).unwrap()
    }

    #[test]
    fn equal_inputs_give_equal_keys() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let a = pkey(&spec, &CacheKeySpec::Default, &base());
        let b = pkey(
            &paladin_spec("Answer: {question}", "m1"),
            &CacheKeySpec::Default,
            &base(),
        );
        assert_eq!(a, b);
        let func = function_spec();
        assert_eq!(
            pkey(&func, &CacheKeySpec::Default, &base()),
            pkey(&func, &CacheKeySpec::Default, &base())
        );
        assert!(a.text().starts_with("v4:"));
        assert_eq!(a.text().len(), "v4:".len() + 16 + 1 + 16 + 1 + 64);
    }

    #[test]
    fn a_key_read_back_from_its_text_is_the_same_key() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let key = pkey(&function_spec(), &CacheKeySpec::Default, &base());
        let text = key.text().into_owned();
        let back = CacheKey::from_raw(text.clone());
        assert_eq!(back, key);
        assert_eq!(hasher.hash_one(&back), hasher.hash_one(&key));
        assert_eq!(back.to_string(), text);
        assert_eq!(format!("{key:?}"), format!("CacheKey({text})"));
        assert!(
            matches!(back.0, Repr::Derived { .. }),
            "parsed, not kept as text"
        );
        // Text that only resembles a key's stays text, and is another key.
        for near in [
            text.to_uppercase().replacen("V4", "v4", 1),
            text.replacen("v4:", "v3:", 1),
            format!("{text}0"),
            text[..text.len() - 1].to_string(),
            text.replacen(':', ";", 2),
        ] {
            let other = CacheKey::from_raw(near.clone());
            assert!(matches!(other.0, Repr::Text(_)), "{near}");
            assert_ne!(other, key, "{near}");
            assert_eq!(other.text(), near);
        }
    }

    #[test]
    fn keys_match_prefixes_and_order_by_their_text() {
        let node = NodeId::new("answerer");
        let key = pkey(&function_spec(), &CacheKeySpec::Default, &base());
        assert!(key.starts_with(&CacheKey::graph_prefix(FP)));
        assert!(key.starts_with(&CacheKey::node_prefix(FP, &node)));
        assert!(!key.starts_with(&CacheKey::node_prefix(FP, &NodeId::new("other"))));
        assert!(!key.starts_with(&CacheKey::graph_prefix("v6:graph-b")));
        assert!(key.text().starts_with(&CacheKey::node_prefix(FP, &node)));
        let other = pkey(
            &function_spec(),
            &CacheKeySpec::Default,
            &state(json!({"other": 2})),
        );
        let mut keys = [
            CacheKey::from_raw("v4:z"),
            other.clone(),
            CacheKey::from_raw("a"),
            key.clone(),
        ];
        keys.sort();
        let texts: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let mut sorted = texts.clone();
        sorted.sort();
        assert_eq!(texts, sorted);
    }

    #[test]
    fn changing_the_prompt_template_changes_the_key() {
        assert_ne!(
            pkey(
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
            pkey(
                &paladin_spec("Answer briefly: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
        );
    }

    #[test]
    fn changing_the_model_changes_the_key() {
        assert_ne!(
            pkey(
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Default,
                &base()
            ),
            pkey(
                &paladin_spec("Answer: {question}", "m2"),
                &CacheKeySpec::Default,
                &base()
            ),
        );
    }

    #[test]
    fn changing_any_other_paladin_setting_changes_the_key() {
        let variants = [
            Paladin::new("A").with_model("m1"),
            Paladin::new("A")
                .with_model("m1")
                .with_system_prompt("be terse"),
            Paladin::new("A").with_model("m1").with_temperature(0.2),
            Paladin::new("A").with_model("m1").with_max_loops(3),
            Paladin::new("A").with_model("m1").with_stop_word("END"),
        ];
        let keys: std::collections::BTreeSet<CacheKey> = variants
            .into_iter()
            .map(|p| {
                let spec = NodeSpec::paladin(p, InputMapping::new("Q: {question}"), f("answer"));
                pkey(&spec, &CacheKeySpec::Default, &base())
            })
            .collect();
        assert_eq!(keys.len(), 5);
    }

    #[test]
    fn changing_the_graph_fingerprint_changes_the_key_and_its_scope() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let node = NodeId::new("answerer");
        let a = derive_key(
            "v6:graph-a",
            &node,
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        let b = derive_key(
            "v6:graph-b",
            &node,
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        assert_ne!(a, b);
        // No cross-graph collision: not even the graph scope is shared, so
        // invalidating one graph never touches the other's entries.
        assert!(a.text().starts_with(&CacheKey::graph_prefix("v6:graph-a")));
        assert!(!b.text().starts_with(&CacheKey::graph_prefix("v6:graph-a")));
    }

    #[test]
    fn the_code_version_changes_the_key_in_both_scopes() {
        let node = NodeId::new("answerer");
        let specs = [
            versioned("answer", None),
            versioned("answer", Some("1")),
            versioned("answer", Some("2")),
            versioned("answer", Some("")),
        ];
        let graph: std::collections::BTreeSet<CacheKey> = specs
            .iter()
            .map(|s| pkey(s, &CacheKeySpec::Default, &base()))
            .collect();
        let node_scoped: std::collections::BTreeSet<CacheKey> =
            specs.iter().map(|s| nkey(s, &base())).collect();
        assert_eq!((graph.len(), node_scoped.len()), (4, 4));
        // ... and each scope's prefix still covers every version.
        assert!(
            graph
                .iter()
                .all(|k| k.starts_with(&CacheKey::node_prefix(FP, &node)))
        );
        assert!(
            node_scoped
                .iter()
                .all(|k| k.starts_with(&CacheKey::node_scope_prefix(&node)))
        );
        // Equal versions, equal keys.
        assert_eq!(
            nkey(&versioned("answer", Some("1")), &base()),
            nkey(&versioned("answer", Some("1")), &base())
        );
    }

    #[test]
    fn a_node_scoped_key_ignores_the_graph_but_not_the_scope() {
        let spec = versioned("answer", Some("1"));
        let node = NodeId::new("answerer");
        let key = |scope, fp| {
            scoped(
                (scope, fp, None),
                "answerer",
                &spec,
                &CacheKeySpec::Default,
                &base(),
                None,
            )
        };
        let a = key(CacheScope::Node, "v6:graph-a");
        assert_eq!(a, key(CacheScope::Node, "v6:graph-b"));
        assert_ne!(a, key(CacheScope::Graph, "v6:graph-a"));
        assert!(a.starts_with(&CacheKey::node_scope_prefix(&node)));
        assert!(!a.starts_with(&CacheKey::node_scope_prefix(&NodeId::new("other"))));
        for fp in ["v6:graph-a", "v6:graph-b"] {
            assert!(!a.starts_with(&CacheKey::graph_prefix(fp)));
            assert!(!key(CacheScope::Graph, fp).starts_with(&CacheKey::node_scope_prefix(&node)));
        }
        // Another node id: another key and another prefix.
        let other = scoped(
            (CacheScope::Node, FP, None),
            "other",
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        );
        assert_ne!(a, other);
        assert!(other.starts_with(&CacheKey::node_scope_prefix(&NodeId::new("other"))));
    }

    #[test]
    fn a_node_scoped_key_covers_the_node_shape() {
        let answer = f("answer");
        let paladin = |p: Paladin, template: &str, output: &FieldName| {
            NodeSpec::paladin(p, InputMapping::new(template), output.clone())
        };
        let m1 = || Paladin::new("A").with_model("m1");
        let specs = [
            paladin(m1(), "Q: {question}", &answer),
            paladin(Paladin::new("A").with_model("m2"), "Q: {question}", &answer),
            paladin(
                m1().with_system_prompt("be terse"),
                "Q: {question}",
                &answer,
            ),
            paladin(m1().with_temperature(0.2), "Q: {question}", &answer),
            // The same rendered text from another template: still another key.
            paladin(m1(), "Q: {question}{context}", &answer),
            paladin(m1(), "Q: {question}", &f("reply")),
            paladin(m1(), "Q: {question}", &answer).with_output_schema(json!({"type": "string"})),
            versioned("answer", Some("1")),
            versioned("renamed", Some("1")),
        ];
        let st = state(json!({"question": "why?", "context": ""}));
        let keys: std::collections::BTreeSet<CacheKey> =
            specs.iter().map(|s| nkey(s, &st)).collect();
        assert_eq!(keys.len(), specs.len());
    }

    #[test]
    fn the_namespace_enters_every_key_and_costs_none_without_one() {
        let spec = versioned("answer", Some("1"));
        let paladin = paladin_spec("Answer: {question}", "m1");
        for scope in [CacheScope::Graph, CacheScope::Node] {
            for spec in [&spec, &paladin] {
                let key = |namespace| {
                    scoped(
                        (scope, FP, namespace),
                        "answerer",
                        spec,
                        &CacheKeySpec::Default,
                        &base(),
                        None,
                    )
                };
                let keys: std::collections::BTreeSet<CacheKey> =
                    [None, Some("a"), Some("b"), Some("")]
                        .into_iter()
                        .map(key)
                        .collect();
                assert_eq!(keys.len(), 4, "{scope:?}");
                assert_eq!(key(Some("a")), key(Some("a")));
                // The prefixes are the namespace's too.
                let prefix = key(None).text()[..37].to_string();
                assert!(keys.iter().all(|k| k.starts_with(&prefix)));
            }
        }
        // Without one, the engine's key is `derive_key`'s.
        assert_eq!(
            scoped(
                (CacheScope::Graph, FP, None),
                "answerer",
                &spec,
                &CacheKeySpec::Default,
                &base(),
                None
            ),
            pkey(&spec, &CacheKeySpec::Default, &base())
        );
    }

    #[test]
    fn changing_the_node_id_changes_the_key() {
        let spec = function_spec();
        let a = derive_key(
            FP,
            &NodeId::new("a"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        let b = derive_key(
            FP,
            &NodeId::new("b"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap();
        assert_ne!(a, b);
        assert!(
            a.text()
                .starts_with(&CacheKey::node_prefix(FP, &NodeId::new("a")))
        );
        assert!(
            !b.text()
                .starts_with(&CacheKey::node_prefix(FP, &NodeId::new("a")))
        );
    }

    #[test]
    fn changing_a_rendered_input_value_changes_a_paladin_key() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let other = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &other)
        );
        // A field the template does not render leaves the Default key alone ...
        let unrelated = state(json!({"question": "why?", "context": "ctx", "other": 2}));
        assert_eq!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &unrelated)
        );
    }

    #[test]
    fn fields_add_to_a_paladin_key() {
        let spec = paladin_spec("Answer: {question}", "m1");
        let fields = CacheKeySpec::Fields(vec![f("context")]);
        let changed = state(json!({"question": "why?", "context": "new", "other": 1}));
        // ... but the named field does, on top of the rendered input.
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &changed)
        );
        let question_changed = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &question_changed)
        );
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &CacheKeySpec::Default, &base())
        );
    }

    #[test]
    fn a_function_default_key_covers_the_whole_snapshot() {
        let spec = function_spec();
        let changed = state(json!({"question": "why?", "context": "ctx", "other": 2}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &changed)
        );
        let appended = state(json!({"question": "why?", "context": "ctx", "other": 1, "log": [1]}));
        assert_ne!(
            pkey(&spec, &CacheKeySpec::Default, &base()),
            pkey(&spec, &CacheKeySpec::Default, &appended)
        );
    }

    #[test]
    fn function_fields_narrow_the_key() {
        let spec = function_spec();
        let fields = CacheKeySpec::Fields(vec![f("question")]);
        let other_changed = state(json!({"question": "why?", "context": "x", "other": 9}));
        assert_eq!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &other_changed)
        );
        let question_changed = state(json!({"question": "how?", "context": "ctx", "other": 1}));
        assert_ne!(
            pkey(&spec, &fields, &base()),
            pkey(&spec, &fields, &question_changed)
        );
    }

    #[test]
    fn field_order_and_repeats_do_not_matter_but_absence_does() {
        let spec = function_spec();
        let ab = CacheKeySpec::Fields(vec![f("question"), f("context")]);
        let ba = CacheKeySpec::Fields(vec![f("context"), f("question"), f("context")]);
        assert_eq!(pkey(&spec, &ab, &base()), pkey(&spec, &ba, &base()));

        let unset = state(json!({"question": "why?"}));
        let null = state(json!({"question": "why?", "context": null}));
        assert_ne!(pkey(&spec, &ab, &unset), pkey(&spec, &ab, &null));
    }

    #[test]
    fn the_task_changes_the_key() {
        let spec = function_spec();
        let node = NodeId::new("worker");
        let k = |task: Option<(&str, &Value)>| {
            derive_key(FP, &node, &spec, &CacheKeySpec::Default, &base(), task).unwrap()
        };
        let p1 = json!({"n": 1});
        let p2 = json!({"n": 2});
        assert_ne!(k(None), k(Some(("t1", &p1))));
        assert_ne!(k(Some(("t1", &p1))), k(Some(("t2", &p1))));
        assert_ne!(k(Some(("t1", &p1))), k(Some(("t1", &p2))));
        assert_eq!(k(Some(("t1", &p1))), k(Some(("t1", &json!({"n": 1})))));
    }

    #[test]
    fn an_unrenderable_input_is_an_error_naming_the_node() {
        let spec = paladin_spec("Answer: {missing}", "m1");
        let err = derive_key(
            FP,
            &NodeId::new("answerer"),
            &spec,
            &CacheKeySpec::Default,
            &base(),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err,
            CacheKeyError::InputNotRendered {
                node: NodeId::new("answerer"),
                source: TemplateError::MissingField("missing".into()),
            }
        );
        assert!(err.to_string().contains("answerer"));
    }

    /// The v4 encoding written out from the materialised snapshot, each
    /// value hashed afresh: what the seeds and the memoised digests must
    /// reproduce.
    fn from_scratch(
        (scope, fp, namespace): (CacheScope, &str, Option<&str>),
        node: &str,
        spec: &NodeSpec,
        key: &CacheKeySpec,
        st: &Battlefield,
        task: Option<(&str, &Value)>,
    ) -> String {
        use crate::canon::value_digest;
        let field = |h: &mut Canon, name: &str| {
            h.str(name);
            match st.get(name) {
                Some(v) if inline_in_key(v) => h.json(v),
                Some(v) => h.digest32(&value_digest(v)),
                None => h.absent(),
            };
        };
        let fields = |h: &mut Canon, names: &[FieldName]| {
            let set: std::collections::BTreeSet<&str> =
                names.iter().map(FieldName::as_str).collect();
            h.count(set.len());
            for name in set {
                field(h, name);
            }
        };
        let segment = |stream: &Canon, label: &str| {
            let mut c = stream.clone();
            c.str(label);
            crate::canon::hex(&c.digest()[..8])
        };
        let code_version = |h: &mut Canon| {
            match spec {
                NodeSpec::Function(n) => match n.code_version() {
                    Some(v) => h.str(v),
                    None => h.absent(),
                },
                _ => h.absent(),
            };
        };
        let mut root = Canon::new("aegis-node-cache/key");
        root.str("v4");
        match scope {
            CacheScope::Node => root.u64(1).align(),
            _ => root.str(fp).align(),
        };
        let mut h = root.clone();
        h.str(node);
        let prefix = format!(
            "v4:{}:{}:",
            segment(&root, "graph-scope"),
            segment(&h, "node-scope")
        );
        match (scope, spec) {
            (CacheScope::Node, NodeSpec::Function(n)) => {
                h.str("function").str(n.kind_name());
                code_version(&mut h);
            }
            (
                CacheScope::Node,
                NodeSpec::Paladin {
                    paladin,
                    input,
                    output_field,
                    output_schema,
                },
            ) => {
                h.str("paladin")
                    .str(&paladin.config_fingerprint())
                    .str(input.template())
                    .str(output_field.as_str())
                    .serialize(output_schema);
            }
            _ => {
                code_version(&mut h);
            }
        }
        h.align();
        let code = match (spec, key) {
            (NodeSpec::Paladin { .. }, CacheKeySpec::Default) => 1,
            (NodeSpec::Paladin { .. }, CacheKeySpec::Fields(_)) => 2,
            (_, CacheKeySpec::Default) => 3,
            (_, CacheKeySpec::Fields(_)) => 4,
        };
        h.u64(code).align();
        if let Some(namespace) = namespace {
            h.u64(5).str(namespace);
        }
        match (spec, key) {
            (NodeSpec::Paladin { paladin, input, .. }, _) => {
                let rendered = input.render_task(st, task).unwrap();
                h.str(&paladin.config_fingerprint()).str(&rendered);
                if let CacheKeySpec::Fields(names) = key {
                    fields(&mut h, names);
                }
            }
            (_, CacheKeySpec::Default) => {
                let names: Vec<&FieldName> = st.field_names().collect();
                h.count(names.len());
                for name in names {
                    field(&mut h, name.as_str());
                }
            }
            (_, CacheKeySpec::Fields(names)) => {
                fields(&mut h, names);
            }
        }
        match task {
            None => h.absent(),
            Some((k, p)) => h.str(k).json(p),
        };
        format!("{prefix}{}", h.hex())
    }

    fn schema_of_all_rules() -> BattlefieldSchema {
        BattlefieldSchema::new(vec![
            FieldSpec::new(f("question"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(f("log"), DispatchRule::Append, None, false),
            FieldSpec::new(f("total"), DispatchRule::Sum, None, false),
            FieldSpec::new(f("meta"), DispatchRule::Merge, None, false),
        ])
    }

    /// Snapshots after a few merges: lists built by appends, sums, merged
    /// objects, and fields no superstep touched (sharing their digests).
    fn evolved() -> Vec<Battlefield> {
        use crate::state::{StateDelta, Writer, merge};
        let schema = schema_of_all_rules();
        let mut st = initial_state(&schema, &json!({"question": "q", "log": [1]})).unwrap();
        let mut out = vec![st.clone()];
        let writes = [
            json!({"log": {"b": 2, "a": [1.0, null]}, "total": 1}),
            json!({"meta": {"z": 1, "y": {"k": "v"}}, "log": [3, 4]}),
            json!({"total": 2.5, "question": "q2"}),
            json!({"log": "x", "meta": {"a": 1e2}}),
        ];
        for w in writes {
            let mut d = StateDelta::new();
            for (k, v) in w.as_object().unwrap() {
                d.set(k.as_str(), v).unwrap();
            }
            st = merge(&schema, &st, [(Writer::node("w"), &d)]).unwrap();
            out.push(st.clone());
        }
        out
    }

    #[test]
    fn memoised_digests_give_the_key_hashed_from_scratch() {
        let specs = [
            (function_spec(), CacheKeySpec::Default),
            (versioned("v", Some("c0de")), CacheKeySpec::Default),
            (
                function_spec(),
                CacheKeySpec::Fields(vec![f("log"), f("meta"), f("absent")]),
            ),
            (
                paladin_spec("Q: {question}", "m"),
                CacheKeySpec::Fields(vec![f("total"), f("log")]),
            ),
            (paladin_spec("Q: {question}", "m"), CacheKeySpec::Default),
        ];
        let payload = json!({"b": [1, 2], "a": 1.0});
        for st in evolved() {
            for (spec, key) in &specs {
                for task in [None, Some(("t1", &payload))] {
                    // Twice: the second derivation reads the memo the first
                    // filled.
                    for _ in 0..2 {
                        let derived = derive_key(FP, &NodeId::new("n"), spec, key, &st, task);
                        assert_eq!(
                            derived.unwrap().text(),
                            from_scratch((CacheScope::Graph, FP, None), "n", spec, key, &st, task)
                        );
                        for keying in [
                            (CacheScope::Node, FP, None),
                            (CacheScope::Node, FP, Some("tenant-a")),
                            (CacheScope::Graph, FP, Some("tenant-a")),
                        ] {
                            assert_eq!(
                                scoped(keying, "n", spec, key, &st, task).text(),
                                from_scratch(keying, "n", spec, key, &st, task)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn one_seed_gives_every_key_derive_key_gives() {
        let node = NodeId::new("answerer");
        let payload = json!([1, {"x": null}]);
        for spec in [paladin_spec("Answer: {question}", "m1"), function_spec()] {
            // A seed serves one node's spec, reused across states, key
            // specs and tasks.
            let seed = KeySeed::new(CacheScope::Graph, FP, &node, &spec);
            for st in evolved() {
                for key in [
                    CacheKeySpec::Default,
                    CacheKeySpec::Fields(vec![f("question"), f("log")]),
                ] {
                    for task in [None, Some(("t", &payload))] {
                        assert_eq!(
                            derive_key_seeded(&seed, &spec, &key, &st, task, None).unwrap(),
                            derive_key(FP, &node, &spec, &key, &st, task).unwrap()
                        );
                    }
                }
            }
            assert!(format!("{seed:?}").contains(&CacheKey::node_prefix(FP, &node)));
            let seed = KeySeed::node_scoped(&node, &spec);
            assert!(format!("{seed:?}").contains(&CacheKey::node_scope_prefix(&node)));
            assert_eq!(seed.scope(), CacheScope::Node);
        }
    }

    #[test]
    fn a_list_built_by_appends_keys_like_the_same_list_given_as_input() {
        let schema = schema_of_all_rules();
        for st in evolved() {
            // The same values, every one a fresh plain value (lists too).
            let fresh = initial_state(&schema, &st.to_json()).unwrap();
            let restored: Battlefield =
                serde_json::from_value(serde_json::to_value(&st).unwrap()).unwrap();
            for key in [
                CacheKeySpec::Default,
                CacheKeySpec::Fields(vec![f("log"), f("meta")]),
            ] {
                let k = |s: &Battlefield| pkey(&function_spec(), &key, s);
                assert_eq!(k(&st), k(&fresh));
                assert_eq!(k(&st), k(&restored));
            }
        }
    }

    #[test]
    fn equal_values_in_other_spellings_give_one_key() {
        let a = state(json!({"question": {"b": [1, 2.0], "a": 1e0}, "other": 100}));
        let b = state(json!({"question": {"a": 1, "b": [1.0, 2]}, "other": 1e2}));
        for key in [
            CacheKeySpec::Default,
            CacheKeySpec::Fields(vec![f("question"), f("other")]),
        ] {
            assert_eq!(
                pkey(&function_spec(), &key, &a),
                pkey(&function_spec(), &key, &b)
            );
        }
        let c = state(json!({"question": {"a": 1, "b": [1, 2.5]}, "other": 100}));
        assert_ne!(
            pkey(&function_spec(), &CacheKeySpec::Default, &a),
            pkey(&function_spec(), &CacheKeySpec::Default, &c)
        );
    }

    #[test]
    fn a_field_no_superstep_wrote_shares_its_digest() {
        let states = evolved();
        let (first, last) = (&states[0], &states[states.len() - 1]);
        // `meta` was set, kept, then rewritten; `log` appended to;
        // `absent` never set; `question` is small: a key reads it in place.
        let digest = |s: &Battlefield, n: &str| s.digest_memo(n).map(|d| d as *const _);
        let (m2, m3) = (digest(&states[2], "meta"), digest(&states[3], "meta"));
        assert!(m2.is_some() && m2 == m3, "unchanged: one memo");
        assert_ne!(digest(first, "log"), digest(last, "log"));
        assert_ne!(digest(&states[3], "meta"), digest(&states[4], "meta"));
        assert_eq!(digest(last, "absent"), None);
        assert_eq!(digest(&states[1], "question"), None, "no memo kept");
    }

    #[test]
    fn small_scalars_are_keyed_in_place_and_the_rest_by_digest() {
        let st = state(json!({
            "question": "why?",
            "other": 12345,
            "context": "a string longer than thirty-two bytes, so hashed",
            "log": ["listed"],
        }));
        let _ = pkey(&function_spec(), &CacheKeySpec::Default, &st);
        // Hashing these alone would cost a SHA-256 block each, per key.
        assert!(!st.digest_computed("question") && !st.digest_computed("other"));
        assert!(st.digest_computed("context") && st.digest_computed("log"));
        // ...and the snapshot keeps no memo for them at all.
        assert!(st.digest_memo("question").is_none() && st.digest_memo("other").is_none());
        assert!(inline_in_key(&json!(null)) && inline_in_key(&json!(1.5)));
        assert!(inline_in_key(&json!("x".repeat(32))) && !inline_in_key(&json!("x".repeat(33))));
        assert!(inline_in_key(&json!([])) && inline_in_key(&json!({})));
        assert!(!inline_in_key(&json!([1])) && !inline_in_key(&json!({"a": 1})));
    }

    /// The v4 encoding, pinned: a change to it must bump the version.
    #[test]
    fn the_v4_encoding_is_pinned() {
        let st = state(json!({"question": "why?", "log": [1, "two", {"b": null, "a": 2.5}]}));
        let payload = json!({"n": 1});
        assert_eq!(
            pkey(&function_spec(), &CacheKeySpec::Default, &st).text(),
            GOLDEN_FUNCTION_DEFAULT
        );
        assert_eq!(
            derive_key(
                FP,
                &NodeId::new("answerer"),
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Fields(vec![f("log"), f("context")]),
                &st,
                Some(("t1", &payload)),
            )
            .unwrap()
            .text(),
            GOLDEN_PALADIN_FIELDS_TASK
        );
        let versioned = versioned("answer", Some("0123456789abcdef0123456789abcdef"));
        assert_eq!(
            pkey(&versioned, &CacheKeySpec::Default, &st).text(),
            GOLDEN_VERSIONED_FUNCTION
        );
        assert_eq!(
            scoped(
                (CacheScope::Node, FP, None),
                "answerer",
                &versioned,
                &CacheKeySpec::Fields(vec![f("question")]),
                &st,
                None
            )
            .text(),
            GOLDEN_NODE_SCOPED_FUNCTION
        );
        assert_eq!(
            scoped(
                (CacheScope::Node, FP, Some("tenant-a")),
                "answerer",
                &paladin_spec("Answer: {question}", "m1"),
                &CacheKeySpec::Default,
                &st,
                Some(("t1", &payload)),
            )
            .text(),
            GOLDEN_NODE_SCOPED_PALADIN_NAMESPACED
        );
    }

    const GOLDEN_FUNCTION_DEFAULT: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:48d60f1f21438de239ff11f413e2e4af3cf567bd09dd480144cb8fffa65a3eab";
    const GOLDEN_PALADIN_FIELDS_TASK: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:6f2054c75ec7293425d6c40b9a20b634256ad7c0e5ee1f39f55241fbb3d50d17";
    const GOLDEN_VERSIONED_FUNCTION: &str = "v4:a4210174e4acae3c:03d97019ae609bc3:66f6a8970faff0136862554a0be35e7c8555ee76c4881bc9516b123430a981b1";
    const GOLDEN_NODE_SCOPED_FUNCTION: &str = "v4:8056e1ca4322c026:4af0880313313e7c:e301adbffde75d219ee8f45f92d84ffb5a0363f8a0c0f055942ff21b3e47db91";
    const GOLDEN_NODE_SCOPED_PALADIN_NAMESPACED: &str = "v4:8056e1ca4322c026:4af0880313313e7c:47f8ef28a5d29d491888142614b1289fe18e35777f38159731dd8c773bd37f03";
}
