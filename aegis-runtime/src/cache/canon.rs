//! The canonical byte encoding node cache keys are hashed over.
//!
//! Every item is tagged and every variable-length item is length-prefixed, so
//! two different inputs can never produce the same bytes by moving a boundary
//! (`"ab" + "c"` versus `"a" + "bc"`), and a JSON value is encoded the same way
//! whatever order its object keys were inserted in, whatever serde_json
//! features other crates enable.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A SHA-256 hasher fed through the canonical encoding.
pub(crate) struct CanonicalHasher(Sha256);

impl CanonicalHasher {
    /// A hasher whose stream starts with `domain`, so digests made for
    /// different purposes never coincide.
    pub(crate) fn new(domain: &str) -> Self {
        let mut h = CanonicalHasher(Sha256::new());
        h.str(domain);
        h
    }

    fn tag(&mut self, tag: u8) {
        self.0.update([tag]);
    }

    fn len(&mut self, n: usize) {
        self.0.update((n as u64).to_le_bytes());
    }

    /// A length-prefixed UTF-8 string.
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.tag(b's');
        self.len(s.len());
        self.0.update(s.as_bytes());
        self
    }

    /// A count (of the items that follow, say).
    pub(crate) fn count(&mut self, n: usize) -> &mut Self {
        self.tag(b'n');
        self.len(n);
        self
    }

    /// The absence of a value, distinct from JSON `null`.
    pub(crate) fn absent(&mut self) -> &mut Self {
        self.tag(b'-');
        self
    }

    /// A JSON value: objects by sorted key, numbers by their JSON text.
    pub(crate) fn json(&mut self, v: &Value) -> &mut Self {
        match v {
            Value::Null => self.tag(b'0'),
            Value::Bool(b) => {
                self.tag(b'b');
                self.0.update([u8::from(*b)]);
            }
            Value::Number(n) => {
                self.tag(b'#');
                let text = n.to_string();
                self.len(text.len());
                self.0.update(text.as_bytes());
            }
            Value::String(s) => {
                self.tag(b'"');
                self.len(s.len());
                self.0.update(s.as_bytes());
            }
            Value::Array(items) => {
                self.tag(b'[');
                self.len(items.len());
                for item in items {
                    self.json(item);
                }
            }
            Value::Object(map) => {
                self.tag(b'{');
                self.len(map.len());
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (k, item) in entries {
                    self.len(k.len());
                    self.0.update(k.as_bytes());
                    self.json(item);
                }
            }
        }
        self
    }

    /// The digest, as 64 lowercase hex digits.
    pub(crate) fn hex(self) -> String {
        hex(&self.0.finalize())
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn digest(f: impl FnOnce(&mut CanonicalHasher)) -> String {
        let mut h = CanonicalHasher::new("test");
        f(&mut h);
        h.hex()
    }

    #[test]
    fn boundaries_cannot_shift() {
        assert_ne!(
            digest(|h| {
                h.str("ab").str("c");
            }),
            digest(|h| {
                h.str("a").str("bc");
            })
        );
        assert_ne!(
            digest(|h| {
                h.json(&json!(["a,b"]));
            }),
            digest(|h| {
                h.json(&json!(["a", "b"]));
            })
        );
    }

    #[test]
    fn object_key_order_does_not_matter_but_values_and_types_do() {
        let mut a = serde_json::Map::new();
        a.insert("x".into(), json!(1));
        a.insert("y".into(), json!(2));
        let mut b = serde_json::Map::new();
        b.insert("y".into(), json!(2));
        b.insert("x".into(), json!(1));
        assert_eq!(
            digest(|h| {
                h.json(&Value::Object(a));
            }),
            digest(|h| {
                h.json(&Value::Object(b));
            })
        );
        assert_ne!(
            digest(|h| {
                h.json(&json!("1"));
            }),
            digest(|h| {
                h.json(&json!(1));
            })
        );
        assert_ne!(
            digest(|h| {
                h.json(&json!(1));
            }),
            digest(|h| {
                h.json(&json!(1.0));
            })
        );
        assert_ne!(
            digest(|h| {
                h.json(&Value::Null);
            }),
            digest(|h| {
                h.absent();
            })
        );
    }

    #[test]
    fn domains_separate_digests() {
        let a = CanonicalHasher::new("one").hex();
        let b = CanonicalHasher::new("two").hex();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
