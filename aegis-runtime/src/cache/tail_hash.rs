//! Hashing only a key's tail, for maps keyed by text that ends in a digest.

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hasher};

/// How many trailing bytes of each write are hashed: 16 hex digits, 64 bits
/// of the SHA-256 every cache key and graph fingerprint ends with.
const TAIL: usize = 16;

/// A [`BuildHasher`] of randomly keyed SipHash (the standard library's, so
/// no one can aim keys at one bucket) over the last [`TAIL`] bytes of each
/// write: a cache key is about 100 bytes, hashed on every lookup, and all
/// but its tail is shared by every key of the node.
///
/// Only for keys whose tail is itself a digest: keys differing only before
/// their last 16 bytes would all share one hash.
#[derive(Clone, Default)]
pub(super) struct TailHash(RandomState);

impl BuildHasher for TailHash {
    type Hasher = TailHasher;

    fn build_hasher(&self) -> TailHasher {
        TailHasher(self.0.build_hasher())
    }
}

pub(super) struct TailHasher(DefaultHasher);

impl Hasher for TailHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(&bytes[bytes.len().saturating_sub(TAIL)..]);
    }

    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tail_is_hashed_and_it_is_keyed() {
        let h = TailHash::default();
        let head = "v3:aaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbb:";
        let digest = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            h.hash_one(format!("{head}{digest}")),
            h.hash_one(format!("v3:other:{digest}"))
        );
        assert_ne!(
            h.hash_one(format!("{head}{digest}")),
            h.hash_one(format!("{head}{digest}0"))
        );
        // Short keys are hashed whole.
        assert_ne!(h.hash_one("k1"), h.hash_one("k2"));
        // Another map's key: no fixed hash to aim at.
        let other = TailHash::default();
        let key = format!("{head}{digest}");
        assert_ne!(h.hash_one(&key), other.hash_one(&key));
    }
}
