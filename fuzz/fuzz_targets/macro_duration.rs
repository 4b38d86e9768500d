//! The `#[aegis]` duration literal parser on arbitrary text: milliseconds or
//! a typed error (whose message quotes the literal), never a panic; a
//! parsed value formats back to itself.
//! Twin: `aegis-macros/src/duration_props.rs`.
//!
//! A proc-macro crate exports nothing but macros, so the parser's module is
//! compiled in here from its source file.
#![no_main]

#[allow(dead_code)]
#[path = "../../aegis-macros/src/duration.rs"]
mod duration;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match duration::parse_millis(text) {
        Ok(ms) => assert_eq!(duration::parse_millis(&duration::format_millis(ms)), Ok(ms)),
        Err(e) => assert!(e.message(text).contains(text)),
    }
});
