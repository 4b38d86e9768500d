//! A cache key's text form: `v4:{graph}:{node}:{digest}`, written out and
//! read back, and the order, hash and display every key shares.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::canon::{Digest32, write_hex};

/// The key scheme's version, the first segment of every [`CacheKey`].
///
/// Bumped whenever the encoding below changes, so entries written under an
/// older scheme can never be read under a newer one. `v3` hashes each
/// state field's value as the digest of its canonical encoding, where `v2`
/// hashed the encoding itself. `v4` adds the node's code version to every
/// key, the node scope ([`CacheScope::Node`](crate::policy::CacheScope::Node): keys seeded by the node's own
/// shape instead of the graph fingerprint) and the engine's cache
/// namespace: a `v3` entry was keyed without the node's code, so serving it
/// could hand a changed node its old answer.
pub const CACHE_KEY_VERSION: &str = "v4";

/// How many hex digits of a digest the scoping segments of a key keep. They
/// only scope invalidation; uniqueness rests on the full digest.
const SCOPE_HEX: usize = 16;

/// A key's text length: `v4:`, two scopes and their colons, the digest.
const KEY_TEXT_LEN: usize = CACHE_KEY_VERSION.len() + 1 + 2 * (SCOPE_HEX + 1) + 64;

/// The key one node activation's result is cached under.
///
/// Its text is `v4:{graph}:{node}:{digest}`, and `digest` is the full
/// SHA-256 of every key component. For a graph-scoped key
/// ([`CacheScope::Graph`](crate::policy::CacheScope::Graph)) `graph` and `node` are short digests of the
/// graph fingerprint and of the node id within it, so
/// [`NodeCache::invalidate_prefix`](crate::cache::NodeCache::invalidate_prefix) with
/// [`CacheKey::graph_prefix`] or [`CacheKey::node_prefix`] drops one graph's
/// or one node's entries (of every code version and namespace). A
/// node-scoped key ([`CacheScope::Node`](crate::policy::CacheScope::Node)) belongs to no graph: its `graph`
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
pub struct CacheKey(pub(super) Repr);

#[derive(Clone, PartialEq, Eq)]
pub(super) enum Repr {
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
pub(super) const SCOPE_BYTES: usize = SCOPE_HEX / 2;

impl CacheKey {
    /// The key of this scheme with these scope segments and digest.
    pub(super) fn derived(scopes: [u8; SCOPE_BYTES * 2], digest: Digest32) -> Self {
        CacheKey(Repr::Derived { scopes, digest })
    }

    /// The key's text, written out for a derived key (see the type's docs).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Text(text) => Cow::Borrowed(text),
            Repr::Derived { .. } => Cow::Owned(self.to_string()),
        }
    }

    /// Whether the key's text starts with `prefix` (as
    /// [`NodeCache::invalidate_prefix`](crate::cache::NodeCache::invalidate_prefix)
    /// matches keys), without allocating.
    pub fn starts_with(&self, prefix: &str) -> bool {
        let mut buf = [0u8; KEY_TEXT_LEN];
        self.with_text(&mut buf, |text| text.starts_with(prefix))
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
pub(super) fn prefix_text(scopes: &[&[u8]]) -> String {
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
