//! The one canonical byte encoding everything Aegis hashes goes through: the
//! graph fingerprint, node cache keys and the Paladin configuration
//! fingerprint.
//!
//! A digest stored today (in a waypoint, in a cache key) must be recomputed
//! identically by the next build, so the encoding depends on nothing a build
//! can change:
//!
//! - every item is tagged and every variable-length item is length-prefixed,
//!   so two different inputs never produce the same bytes by moving a
//!   boundary (`"ab" + "c"` versus `"a" + "bc"`);
//! - JSON objects are encoded by sorted key, never in `serde_json::Map`'s
//!   iteration order, which becomes insertion order as soon as any crate in
//!   the build enables serde_json's `preserve_order`;
//! - a JSON number is encoded by its value, never by its text (which
//!   `arbitrary_precision` preserves as written): `1`, `1.0` and `1e0` are
//!   one number and encode alike.
//!
//! A leaf module: it imports nothing from the crate, so every folder may use it.

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// A SHA-256 hasher fed through the canonical encoding.
///
/// Cloning copies the hasher's state, so a stream's common beginning (a
/// cache key's domain, version, graph and node) is fed once and each key
/// continues from a copy.
#[derive(Clone)]
pub(crate) struct Canon {
    sha: Sha256,
    /// Bytes fed so far, for [`Canon::align`].
    fed: u64,
}

/// A SHA-256 digest.
pub(crate) type Digest32 = [u8; 32];

/// The domain of [`value_digest`].
const VALUE_DOMAIN: &str = "aegis/json-value";

impl Canon {
    /// A hasher whose stream starts with `domain`, so digests made for
    /// different purposes never coincide.
    pub(crate) fn new(domain: &str) -> Self {
        let mut c = Canon {
            sha: Sha256::new(),
            fed: 0,
        };
        c.str(domain);
        c
    }

    fn feed(&mut self, b: &[u8]) {
        self.fed += b.len() as u64;
        self.sha.update(b);
    }

    fn tag(&mut self, tag: u8) {
        self.feed(&[tag]);
    }

    fn len(&mut self, n: usize) {
        self.feed(&(n as u64).to_le_bytes());
    }

    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.feed(b);
    }

    /// A length-prefixed UTF-8 string.
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.tag(b's');
        self.bytes(s.as_bytes());
        self
    }

    /// A count (of the items that follow, say).
    pub(crate) fn count(&mut self, n: usize) -> &mut Self {
        self.tag(b'n');
        self.len(n);
        self
    }

    /// An unsigned integer.
    pub(crate) fn u64(&mut self, n: u64) -> &mut Self {
        self.tag(b'u');
        self.feed(&n.to_le_bytes());
        self
    }

    /// A flag.
    pub(crate) fn bool(&mut self, b: bool) -> &mut Self {
        self.tag(b'b');
        self.feed(&[u8::from(b)]);
        self
    }

    /// The absence of a value, distinct from JSON `null`.
    pub(crate) fn absent(&mut self) -> &mut Self {
        self.tag(b'-');
        self
    }

    /// A JSON value: objects by sorted key, numbers by their canonical text.
    pub(crate) fn json(&mut self, v: &Value) -> &mut Self {
        match v {
            Value::Null => self.tag(b'0'),
            Value::Bool(b) => {
                self.tag(b'?');
                self.feed(&[u8::from(*b)]);
            }
            Value::Number(n) => {
                self.tag(b'#');
                self.number(n);
            }
            Value::String(s) => {
                self.tag(b'"');
                self.bytes(s.as_bytes());
            }
            Value::Array(items) => {
                self.array(items.len(), items.iter());
            }
            Value::Object(map) => {
                self.tag(b'{');
                self.len(map.len());
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (k, item) in entries {
                    self.bytes(k.as_bytes());
                    self.json(item);
                }
            }
        }
        self
    }

    /// A JSON array of `len` items, given one by one: exactly the bytes
    /// [`Canon::json`] writes for `Value::Array` of them, so an array held
    /// in another container (a persistent list) encodes alike.
    pub(crate) fn array<'a>(
        &mut self,
        len: usize,
        items: impl Iterator<Item = &'a Value>,
    ) -> &mut Self {
        self.tag(b'[');
        self.len(len);
        for item in items {
            self.json(item);
        }
        self
    }

    /// A value's digest ([`value_digest`]) in its place: fixed length, so
    /// it needs no length prefix.
    pub(crate) fn digest32(&mut self, d: &Digest32) -> &mut Self {
        self.tag(b'=');
        self.feed(d);
        self
    }

    /// Pads the stream with a tagged filler item up to SHA-256's 64-byte
    /// block boundary, so every clone continues on a fresh block and a
    /// short continuation costs one compression, whatever came before.
    pub(crate) fn align(&mut self) -> &mut Self {
        const BLOCK: u64 = 64;
        // The filler's own tag and length prefix count towards the boundary.
        let filler = (BLOCK - (self.fed + 9) % BLOCK) % BLOCK;
        self.tag(b'_');
        self.len(filler as usize);
        self.feed(&[0; 64][..filler as usize]);
        self
    }

    /// A number's canonical text ([`canonical_number`]), integers written
    /// without an allocation: they are most of the numbers a key meets.
    fn number(&mut self, n: &Number) {
        let (negative, magnitude) = match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => (false, u),
            // as_u64 took every non-negative integer.
            (None, Some(i)) => (true, i.unsigned_abs()),
            (None, None) => {
                self.bytes(canonical_number(n).as_bytes());
                return;
            }
        };
        let mut buf = [0u8; 21];
        let mut at = decimal(magnitude, &mut buf);
        if negative {
            at -= 1;
            buf[at] = b'-';
        }
        self.bytes(&buf[at..]);
    }

    /// A serialisable value, through its JSON form (so through [`Canon::json`]
    /// and its sorted keys). A value serde cannot express as JSON (a map
    /// with non-string keys) is encoded as its error, which is as stable as
    /// the type itself.
    pub(crate) fn serialize(&mut self, v: &impl serde::Serialize) -> &mut Self {
        match serde_json::to_value(v) {
            Ok(value) => self.json(&value),
            Err(e) => {
                self.tag(b'!');
                self.bytes(e.to_string().as_bytes());
                self
            }
        }
    }

    /// The digest, as 64 lowercase hex digits.
    pub(crate) fn hex(self) -> String {
        hex(&self.digest())
    }

    /// The digest.
    pub(crate) fn digest(self) -> Digest32 {
        self.sha.finalize().into()
    }
}

/// Whether a longer stream encodes `value` itself rather than its digest
/// ([`Canon::digest32`]): a scalar whose encoding is no longer than a
/// digest. Hashing such a value on its own first would cost a whole SHA-256
/// block (the changed counter of every superstep, say) to shorten it by
/// nothing; so a cache key writes it in place, and a snapshot keeps no
/// digest memo for it. The encoding's tag tells the two forms apart, so no
/// value can pass for a digest.
pub(crate) fn inline_in_key(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
        Value::String(s) => s.len() <= 32,
        Value::Array(items) => items.is_empty(),
        Value::Object(entries) => entries.is_empty(),
    }
}

/// The digest of one JSON value's canonical encoding ([`Canon::json`]):
/// equal values (objects in any key order, numbers in any spelling) have
/// one digest, and a value's digest can stand in for the value in a longer
/// stream ([`Canon::digest32`]) without re-reading it.
pub(crate) fn value_digest(v: &Value) -> Digest32 {
    let mut c = Canon::new(VALUE_DOMAIN);
    c.json(v);
    c.digest()
}

/// [`value_digest`] of the array of `items`, without building the array.
pub(crate) fn array_digest<'a>(len: usize, items: impl Iterator<Item = &'a Value>) -> Digest32 {
    let mut c = Canon::new(VALUE_DOMAIN);
    c.array(len, items);
    c.digest()
}

/// Writes `n` in decimal at the end of `buf` (20 digits at most), and
/// returns where it starts.
fn decimal(mut n: u64, buf: &mut [u8; 21]) -> usize {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return at;
        }
    }
}

/// The one text of a JSON number's value.
///
/// Integers (and floats with no fractional part that fit in 64 bits) are
/// written in decimal with no exponent; other floats in Rust's shortest
/// round-trip scientific form (`1.5e-7`). `-0` is `0`.
fn canonical_number(n: &Number) -> String {
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    match n.as_f64() {
        Some(f) if f.is_finite() => {
            if f.fract() == 0.0 {
                // 2^64 and -2^63 are exact in f64, so the casts are exact.
                if f == 0.0 {
                    return "0".to_owned();
                }
                if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                    return (f as u64).to_string();
                }
                if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                    return (f as i64).to_string();
                }
            }
            format!("{f:e}")
        }
        // Only reachable with `arbitrary_precision`, for a number beyond
        // f64's range: its text is all there is.
        _ => n.to_string(),
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Writes lowercase hex of `bytes` at the start of `out` (which must hold
/// twice as many bytes), by table; returns how many digits it wrote.
pub(crate) fn write_hex(out: &mut [u8], bytes: &[u8]) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    bytes.len() * 2
}

/// Appends lowercase hex of `bytes` to `s`, by table: `core::fmt` per byte
/// cost more than the SHA-256 it printed, and a `String::push` per digit
/// several times what one UTF-8 check of a stack buffer costs.
pub(crate) fn push_hex(s: &mut String, bytes: &[u8]) {
    let mut buf = [0u8; 64];
    s.reserve(bytes.len() * 2);
    for chunk in bytes.chunks(buf.len() / 2) {
        let len = write_hex(&mut buf, chunk);
        let out = &buf[..len];
        match std::str::from_utf8(out) {
            Ok(text) => s.push_str(text),
            // Never taken (every byte is an ASCII digit); the same text
            // digit by digit, rather than a panic.
            Err(_) => s.extend(out.iter().copied().map(char::from)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn digest(f: impl FnOnce(&mut Canon)) -> String {
        let mut h = Canon::new("test");
        f(&mut h);
        h.hex()
    }

    fn of(v: Value) -> String {
        digest(|h| {
            h.json(&v);
        })
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
        assert_ne!(of(json!(["a,b"])), of(json!(["a", "b"])));
        assert_ne!(of(json!({"ab": "c"})), of(json!({"a": "bc"})));
    }

    #[test]
    fn object_key_order_does_not_matter_but_values_and_types_do() {
        let mut a = serde_json::Map::new();
        a.insert("x".into(), json!(1));
        a.insert("y".into(), json!({"q": 1, "p": 2}));
        let mut b = serde_json::Map::new();
        b.insert("y".into(), json!({"p": 2, "q": 1}));
        b.insert("x".into(), json!(1));
        assert_eq!(of(Value::Object(a)), of(Value::Object(b)));
        assert_ne!(of(json!("1")), of(json!(1)));
        assert_ne!(of(json!(true)), of(json!(1)));
        assert_ne!(
            of(Value::Null),
            digest(|h| {
                h.absent();
            })
        );
        assert_ne!(
            digest(|h| {
                h.u64(1);
            }),
            digest(|h| {
                h.count(1);
            })
        );
    }

    #[test]
    fn a_number_is_encoded_by_its_value_not_its_text() {
        assert_eq!(of(json!(1)), of(json!(1.0)));
        assert_eq!(of(json!(100)), of(json!(1e2)));
        assert_eq!(of(json!(0)), of(json!(-0.0)));
        assert_eq!(of(json!(-3)), of(json!(-3.0)));
        assert_eq!(of(json!(u64::MAX)), of(json!(u64::MAX)));
        assert_ne!(of(json!(1)), of(json!(1.5)));
        assert_ne!(of(json!(-1)), of(json!(1)));
        // Parsed from different texts of one value.
        let parsed = |s: &str| of(serde_json::from_str(s).unwrap());
        assert_eq!(parsed("[1.50, 2E3]"), parsed("[1.5, 2000]"));
        assert_eq!(parsed("0.1"), parsed("1e-1"));
    }

    #[test]
    fn canonical_number_texts() {
        let t = |v: Value| match v {
            Value::Number(n) => canonical_number(&n),
            _ => unreachable!(),
        };
        assert_eq!(t(json!(1.0)), "1");
        assert_eq!(t(json!(-0.0)), "0");
        assert_eq!(t(json!(-2.0)), "-2");
        assert_eq!(t(json!(1.5e-7)), "1.5e-7");
        assert_eq!(t(json!(0.1)), "1e-1");
        assert_eq!(t(json!(1e300)), "1e300");
        assert_eq!(t(json!(i64::MIN)), i64::MIN.to_string());
        assert_eq!(t(json!(u64::MAX)), u64::MAX.to_string());
    }

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), expected);
        assert_eq!(hex(&[]), "");
    }

    /// The allocation-free integer path writes exactly the text
    /// `canonical_number` does, so digests stored before it still match.
    #[test]
    fn integers_hash_as_their_canonical_text() {
        let by_text = |n: &Number| {
            let mut h = Canon::new("test");
            h.tag(b'#');
            h.bytes(canonical_number(n).as_bytes());
            h.hex()
        };
        let mut ints: Vec<Value> = vec![json!(u64::MAX), json!(i64::MIN), json!(i64::MAX)];
        for p in 0..20u32 {
            let n = 10u64.pow(p);
            ints.extend([json!(n), json!(n - 1), json!(n + 1)]);
            if let Ok(i) = i64::try_from(n) {
                ints.extend([json!(-i), json!(1 - i), json!(-i - 1)]);
            }
        }
        for v in ints {
            let Value::Number(n) = &v else { unreachable!() };
            assert_eq!(of(v.clone()), by_text(n), "{v}");
        }
    }

    #[test]
    fn align_ends_on_a_block_boundary_and_is_an_item() {
        for n in 0..200 {
            let mut h = Canon::new("test");
            h.str(&"x".repeat(n)).align();
            assert_eq!(h.fed % 64, 0, "after a {n}-byte string");
            let once = h.fed;
            h.align();
            assert_eq!(h.fed, once + 64, "a filler item even when aligned");
        }
        assert_ne!(
            digest(|h| {
                h.str("a").align();
            }),
            digest(|h| {
                h.str("a");
            })
        );
    }

    #[test]
    fn an_array_given_item_by_item_digests_as_the_array() {
        let items = vec![json!(1), json!({"b": [2.0], "a": null}), json!("s")];
        assert_eq!(
            value_digest(&Value::Array(items.clone())),
            array_digest(items.len(), items.iter())
        );
        assert_eq!(
            value_digest(&json!([])),
            array_digest(0, std::iter::empty())
        );
        assert_ne!(value_digest(&json!([1])), value_digest(&json!(1)));
        assert_ne!(value_digest(&Value::Null), value_digest(&json!(false)));
    }

    #[test]
    fn serialize_goes_through_sorted_json() {
        #[derive(serde::Serialize)]
        struct S {
            b: u32,
            a: Option<String>,
        }
        assert_eq!(
            digest(|h| {
                h.serialize(&S { b: 2, a: None });
            }),
            of(json!({"a": null, "b": 2}))
        );
    }

    #[test]
    fn domains_separate_digests() {
        let a = Canon::new("one").hex();
        let b = Canon::new("two").hex();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
