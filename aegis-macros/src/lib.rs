//! Procedural macros for `aegis`: `#[aegis(...)]` and `graph!`.
//!
//! The grammar and its compile-time checks arrive with their own issue; this
//! crate is the place they live.
