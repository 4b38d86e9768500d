//! The runtime behind the `aegis` facade: state, graphs, the superstep
//! engine and the Aegis fault-tolerance layer. Use it through `aegis`
//! (package `aegis-agents`), which re-exports this crate's modules; its crate
//! docs (the README)
//! open with a glossary of the themed names — `Battlefield` is the graph
//! state, a `Waypoint` a checkpoint, a `Battalion` a subgraph, a `Paladin`
//! an LLM agent, an `Aegis` one node's retry/timeout/fallback/cache policy.

#![forbid(unsafe_code)]
// The `__internal` hooks are `pub` items re-exported only with that feature;
// without it they are crate-private and partly unused. CI lints with every
// feature, where neither allowance applies.
#![cfg_attr(
    not(feature = "__internal"),
    allow(unreachable_pub, unused_imports, dead_code)
)]

pub mod cache;
mod canon;
mod config;
#[cfg(feature = "console")]
pub mod console;
mod deadline;
pub mod engine;
pub mod error;
mod few;
mod fnv;
pub mod graph;
pub mod id;
pub mod llm;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod paladin;
pub mod policy;
pub mod render;
mod share;
mod spend;
pub mod state;
pub mod trace;
pub mod waypoint;
pub mod worker;

/// What the code `#[aegis]` and `graph!` generate calls; not a public API
/// (the facade reaches it as `aegis::__private`), and it changes with the
/// macros.
#[doc(hidden)]
pub mod __macro_support;

/// Hooks for this workspace's tests, fuzz targets and benchmarks (the SSE
/// parsers, key derivation, the redaction helpers): behind the `__internal`
/// feature, not part of the API, and free to change in any release.
#[cfg(feature = "__internal")]
#[doc(hidden)]
pub mod __internal;

/// Re-exported so users and generated code name one version.
pub use async_trait::async_trait;
