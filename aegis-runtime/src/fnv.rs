//! FNV-1a, the one non-keyed hash: for lookups keyed by names a graph's
//! author chose, where a keyed hash buys no protection and costs more than
//! the lookup it serves, and for values that must not change between Rust
//! releases (a std `Hasher` is not promised to be stable).

use std::hash::Hasher;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// An FNV-1a hasher; [`Fnv::default`] starts from the standard offset.
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(OFFSET)
    }
}

impl Fnv {
    /// A hasher whose start is moved by `seed`: the same fields under two
    /// seeds hash apart.
    pub(crate) fn seeded(seed: u64) -> Self {
        Fnv(OFFSET ^ seed)
    }

    /// Feeds one field and a separator after it, so the fields ("ab", "c")
    /// and ("a", "bc") hash apart.
    pub(crate) fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.write(bytes);
        self.write(&[0xff]);
        self
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(PRIME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_fnv_1a_vectors() {
        let hash = |s: &str| {
            let mut h = Fnv::default();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fields_are_separated_and_seeds_move_the_start() {
        let two = |a: &str, b: &str| {
            Fnv::seeded(7)
                .field(a.as_bytes())
                .field(b.as_bytes())
                .finish()
        };
        assert_ne!(two("ab", "c"), two("a", "bc"));
        assert_ne!(
            Fnv::seeded(1).field(b"x").finish(),
            Fnv::seeded(2).field(b"x").finish()
        );
    }
}
