//! Thread ids: which ones a store holds, which ones a caller may start, and
//! how a Battalion names its child threads.
//!
//! One set of rules for every store, checked before anything is written or
//! read, so an id behaves the same on [`InMemoryWaypointStore`],
//! `SqliteWaypointStore` and `PostgresWaypointStore`:
//!
//! - not empty;
//! - at most [`MAX_THREAD_ID_BYTES`] bytes of UTF-8 (a PostgreSQL index
//!   entry cannot grow without bound);
//! - no NUL character (PostgreSQL `TEXT` cannot hold one).
//!
//! Everything else round-trips exactly: whitespace, `/`, `#`, quotes and
//! SQL metacharacters, any script, emoji.
//!
//! A *root* thread id, the one given to `WarEngine::start`, `resume` or
//! `Chronicle::fork`, additionally never contains
//! [`BATTALION_SEPARATOR`] (`>`): that character marks the threads a
//! Battalion makes for its children, `{parent}>{node}`, so that no caller's
//! thread can ever be taken for a child, and no two children can share one.
//!
//! [`InMemoryWaypointStore`]: super::InMemoryWaypointStore

use std::fmt::Write as _;

use crate::id::NodeId;

/// The most bytes (UTF-8) a thread id may have, on every store.
///
/// A Battalion's child id is longer than its parent's (by the escaped node
/// id plus 1, and a `#visit` suffix after the first visit), so deeply nested
/// Battalions under a long root id reach the bound sooner; a child id over
/// it fails the Battalion node with a permanent error.
pub const MAX_THREAD_ID_BYTES: usize = 1024;

/// The character that separates a Battalion child's thread id from its
/// parent's: `{parent}>{node}`. A root thread id may not contain it.
pub const BATTALION_SEPARATOR: char = '>';

/// How many characters of an offending id an error shows.
const PREVIEW_CHARS: usize = 64;

/// Why a thread id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadIdError {
    /// The id is empty.
    #[error("a thread id must not be empty")]
    Empty,
    /// The id is longer than [`MAX_THREAD_ID_BYTES`].
    #[error(
        "thread id {preview} is {bytes} bytes long; a waypoint store holds at most {max} bytes"
    )]
    TooLong {
        /// The id's start, quoted and escaped.
        preview: String,
        /// Its length in bytes.
        bytes: usize,
        /// [`MAX_THREAD_ID_BYTES`].
        max: usize,
    },
    /// The id contains a NUL character, which PostgreSQL cannot store; no
    /// store accepts it, so it behaves the same everywhere.
    #[error(
        "thread id {preview} contains a NUL character (at byte {position}), which a waypoint store cannot hold"
    )]
    ContainsNul {
        /// The id's start, quoted and escaped.
        preview: String,
        /// The byte offset of the first NUL.
        position: usize,
    },
    /// A root thread id contains [`BATTALION_SEPARATOR`], which only the
    /// engine's Battalion child threads carry.
    #[error(
        "thread id {preview} contains `>` (at byte {position}), which is reserved for Battalion child threads (`parent>node`); choose another character"
    )]
    Reserved {
        /// The id's start, quoted and escaped.
        preview: String,
        /// The byte offset of the first `>`.
        position: usize,
    },
}

/// `id` quoted and escaped (control characters stay visible), cut after
/// [`PREVIEW_CHARS`] characters.
fn preview(id: &str) -> String {
    match id.char_indices().nth(PREVIEW_CHARS) {
        None => format!("{id:?}"),
        Some((cut, _)) => format!("{:?}…", &id[..cut]),
    }
}

/// Checks that every waypoint store can hold `thread_id`: not empty, at
/// most [`MAX_THREAD_ID_BYTES`] bytes, no NUL. Every built-in store calls it
/// on each `put`, `latest` and `history`, so an id is refused identically
/// everywhere, before anything is read or written.
pub fn validate_thread_id(thread_id: &str) -> Result<(), ThreadIdError> {
    if thread_id.is_empty() {
        return Err(ThreadIdError::Empty);
    }
    if thread_id.len() > MAX_THREAD_ID_BYTES {
        return Err(ThreadIdError::TooLong {
            preview: preview(thread_id),
            bytes: thread_id.len(),
            max: MAX_THREAD_ID_BYTES,
        });
    }
    if let Some(position) = thread_id.find('\0') {
        return Err(ThreadIdError::ContainsNul {
            preview: preview(thread_id),
            position,
        });
    }
    Ok(())
}

/// Checks a thread id a caller names (`WarEngine::start`, `resume`,
/// `Chronicle::fork`'s new thread): what [`validate_thread_id`] checks, and
/// no [`BATTALION_SEPARATOR`], which only Battalion child threads carry.
pub fn validate_root_thread_id(thread_id: &str) -> Result<(), ThreadIdError> {
    validate_thread_id(thread_id)?;
    match thread_id.find(BATTALION_SEPARATOR) {
        Some(position) => Err(ThreadIdError::Reserved {
            preview: preview(thread_id),
            position,
        }),
        None => Ok(()),
    }
}

/// The thread a Battalion node `node` of thread `parent` runs its child in,
/// on the node's `visit`-th activation in that thread (1 for the first).
///
/// `{parent}>{node}` for the first visit, `{parent}>{node}#{visit}` for a
/// later one, where `node` is escaped: `%`, `>`, `#` and control characters
/// become `%XX` (their UTF-8 bytes in hex); anything else, `/` included,
/// stays as it is. Parent `acme/billing` with node `invoice` is
/// `acme/billing>invoice`, parent `acme` with node `billing/invoice` is
/// `acme>billing/invoice`.
///
/// The encoding is unambiguous: a root id holds no `>`, so the first `>`
/// ends it, and each later `>` starts one escaped node id (free of `#` and
/// `>`) with an optional `#visit`. Different (parent, node, visit) triples
/// never give the same id, and no root thread id equals a child's.
///
/// ```
/// use aegis_runtime::id::{NodeId, battalion_thread_id};
///
/// assert_eq!(battalion_thread_id("orders", &NodeId::new("checkout"), 1), "orders>checkout");
/// assert_eq!(battalion_thread_id("orders", &NodeId::new("checkout"), 3), "orders>checkout#3");
/// assert_eq!(
///     battalion_thread_id("orders>checkout", &NodeId::new("pay#1"), 1),
///     "orders>checkout>pay%231"
/// );
/// ```
pub fn battalion_thread_id(parent: &str, node: &NodeId, visit: u32) -> String {
    let node = node.as_str();
    let mut id = String::with_capacity(parent.len() + node.len() + 12);
    id.push_str(parent);
    id.push(BATTALION_SEPARATOR);
    for c in node.chars() {
        if matches!(c, '%' | '>' | '#') || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                // Writing to a String cannot fail.
                let _ = write!(id, "%{b:02X}");
            }
        } else {
            id.push(c);
        }
    }
    if visit > 1 {
        let _ = write!(id, "#{visit}");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The inverse of [`battalion_thread_id`]: (root, [(node, visit)]).
    fn parse(id: &str) -> (String, Vec<(String, u32)>) {
        let mut parts = id.split(BATTALION_SEPARATOR);
        let root = parts.next().unwrap_or_default().to_string();
        let children = parts
            .map(|part| {
                let (node, visit) = match part.split_once('#') {
                    Some((node, visit)) => (node, visit.parse().unwrap()),
                    None => (part, 1),
                };
                let mut bytes = Vec::new();
                let raw = node.as_bytes();
                let mut i = 0;
                while i < raw.len() {
                    if raw[i] == b'%' {
                        let hex = std::str::from_utf8(&raw[i + 1..i + 3]).unwrap();
                        bytes.push(u8::from_str_radix(hex, 16).unwrap());
                        i += 3;
                    } else {
                        bytes.push(raw[i]);
                        i += 1;
                    }
                }
                (String::from_utf8(bytes).unwrap(), visit)
            })
            .collect();
        (root, children)
    }

    #[test]
    fn parents_and_nodes_with_separators_in_them_get_different_children() {
        let a = battalion_thread_id("acme/billing", &NodeId::new("invoice"), 1);
        let b = battalion_thread_id("acme", &NodeId::new("billing/invoice"), 1);
        assert_eq!(a, "acme/billing>invoice");
        assert_eq!(b, "acme>billing/invoice");
        assert_ne!(a, b);
        // A caller's own `orders/checkout`, or `orders>checkout`, is never
        // the child of `orders` + `checkout`.
        let child = battalion_thread_id("orders", &NodeId::new("checkout"), 1);
        assert_ne!(child, "orders/checkout");
        assert!(validate_root_thread_id("orders/checkout").is_ok());
        assert!(matches!(
            validate_root_thread_id(&child),
            Err(ThreadIdError::Reserved { position: 6, .. })
        ));
        // A node id that looks like a visit, or holds the separator.
        for (node, visit) in [("a#2", 1), ("a", 2), ("a>b", 1), ("a%3Eb", 1), ("a\0b", 1)] {
            let id = battalion_thread_id("p", &NodeId::new(node), visit);
            assert_eq!(parse(&id), ("p".into(), vec![(node.into(), visit)]), "{id}");
            assert!(validate_thread_id(&id).is_ok(), "{id:?}");
        }
        assert_eq!(battalion_thread_id("p", &NodeId::new("a\nb"), 1), "p>a%0Ab");
        assert_eq!(battalion_thread_id("p", &NodeId::new("é>"), 1), "p>é%3E");
    }

    /// A small deterministic generator, so the exhaustive check below
    /// covers many shapes without a property-testing dependency.
    fn pieces() -> Vec<&'static str> {
        vec![
            "a", "b", "a/b", "a#2", "#", "%", "%23", ">", "a>b", "", "é", "🧵", "a b", "\n", "x%",
        ]
    }

    #[test]
    fn every_nesting_of_parents_nodes_and_visits_has_its_own_child() {
        let mut seen: HashMap<String, (String, Vec<(String, u32)>)> = HashMap::new();
        let roots = ["r", "r/s", "r#2", "r%3E", "r s", "🧵"];
        for root in roots {
            let mut frontier = vec![(root.to_string(), Vec::new())];
            for _depth in 0..2 {
                let mut next = Vec::new();
                for (parent, path) in &frontier {
                    for node in pieces() {
                        for visit in [1, 2, 10] {
                            let id = battalion_thread_id(parent, &NodeId::new(node), visit);
                            let mut p: Vec<(String, u32)> = path.clone();
                            p.push((node.to_string(), visit));
                            let triple = (root.to_string(), p.clone());
                            assert_eq!(parse(&id), triple, "{id}");
                            if let Some(other) = seen.insert(id.clone(), triple.clone()) {
                                panic!("{id} names both {other:?} and {triple:?}");
                            }
                            assert!(!roots.contains(&id.as_str()));
                            next.push((id, p));
                        }
                    }
                }
                frontier = next;
            }
        }
        assert!(seen.len() > 2_000);
    }

    #[test]
    fn ids_a_store_cannot_hold_are_refused_with_a_reason() {
        assert_eq!(validate_thread_id(""), Err(ThreadIdError::Empty));
        let long = "x".repeat(MAX_THREAD_ID_BYTES + 1);
        assert_eq!(
            validate_thread_id(&long),
            Err(ThreadIdError::TooLong {
                preview: format!("{:?}…", "x".repeat(64)),
                bytes: MAX_THREAD_ID_BYTES + 1,
                max: MAX_THREAD_ID_BYTES,
            })
        );
        assert!(validate_thread_id(&"x".repeat(MAX_THREAD_ID_BYTES)).is_ok());
        // The bound is in bytes: 256 four-byte emoji fit, 257 do not.
        assert!(validate_thread_id(&"🧵".repeat(256)).is_ok());
        assert!(validate_thread_id(&"🧵".repeat(257)).is_err());
        let err = validate_thread_id("ab\0c").unwrap_err();
        assert_eq!(
            err,
            ThreadIdError::ContainsNul {
                preview: "\"ab\\0c\"".into(),
                position: 2
            }
        );
        assert!(
            err.to_string().contains("NUL character (at byte 2)"),
            "{err}"
        );
        for ok in [
            " ",
            "a/b",
            "a#1",
            "'; DROP TABLE x; --",
            "é🧵",
            "\t\n",
            "a>b",
        ] {
            assert!(validate_thread_id(ok).is_ok(), "{ok:?}");
        }
        let err = validate_root_thread_id("a>b").unwrap_err();
        assert!(err.to_string().contains("reserved for Battalion"), "{err}");
    }
}
