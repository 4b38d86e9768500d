//! Node cache keys: a versioned SHA-256 digest of everything that decides a
//! node's result.
//!
//! [`text`] is the key's written form, [`seed`] what every key of a graph or
//! a node starts from, and [`derive`] one activation's key from its seed.

mod derive;
mod seed;
#[cfg(test)]
mod tests;
mod text;

pub(crate) use derive::derive_key_seeded;
pub use derive::{CacheKeyError, derive_key};
pub(crate) use seed::{GraphKeySeed, KeySeed};
pub use text::{CACHE_KEY_VERSION, CacheKey};
