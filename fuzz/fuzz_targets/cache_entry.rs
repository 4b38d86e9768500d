//! Node cache entry decoding (`CacheEntry::from_bytes`, what a backend
//! reads back from storage) on arbitrary bytes: an entry or a typed error,
//! never a panic; a decoded entry re-encodes and decodes to itself.
//! (There is no waypoint decoder yet: waypoints are only serialised.)
#![no_main]

use aegis::cache::CacheEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = CacheEntry::from_bytes(data) {
        let bytes = entry.to_bytes().expect("a decoded entry encodes");
        assert_eq!(CacheEntry::from_bytes(&bytes).ok(), Some(entry));
    }
});
