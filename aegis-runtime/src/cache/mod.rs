//! Node caching: serve a node's result from a cache instead of running it.
//!
//! Two things are needed: a backend on the engine
//! (`WarEngine::with_node_cache(Arc<dyn NodeCache>)`) and a
//! [`CachePolicy`](crate::policy::CachePolicy) in a node's [`Aegis`](crate::policy::Aegis).
//!
//! - [`NodeCache`] is the backend trait: `get`, `put` (the entry carries its
//!   expiry), `invalidate_prefix`, `invalidate_all`. [`InMemoryNodeCache`]
//!   is always available and bounded; `RedisNodeCache` needs the
//!   `redis-cache` feature. Both pass one contract test suite.
//! - The engine makes the [`CacheKey`] (with the hidden `derive_key`): a
//!   versioned SHA-256 over a canonical, length-prefixed encoding of the
//!   node id, the node's code version (`StateNode::code_version`: an
//!   `#[aegis]` function's token digest, a builder node's version), the
//!   node's input (a Paladin node's rendered prompt and configuration
//!   fingerprint; a Function node's snapshot or named fields, each field by
//!   the digest of its value, memoised on the snapshot), the mustered task
//!   and the engine's cache namespace (`WarEngine::with_cache_namespace`),
//!   plus, by the policy's [`CacheScope`](crate::policy::CacheScope), the graph
//!   fingerprint (`Graph`, the default: two graphs never share a key) or the
//!   node's own shape (`Node`: any graph holding the same node shares its
//!   entries). Change the node's code, the prompt, the model or the input
//!   and the key changes, in either scope; change the graph and a
//!   graph-scoped key changes; change the namespace and every key does.
//! - The engine applies its rules around a backend (the hidden
//!   `NodeCacheHandle`): a lookup re-checks expiry by its [`CacheClock`] (a
//!   read at exactly `expires_at` is a miss) whatever the backend served, an
//!   entry that records another key than the one it was found under, or whose
//!   delta does not fit the graph's schema ([`EntryMisfit`]), is a miss
//!   logged at `warn` (the node's fresh result then overwrites it), and a
//!   backend error is a miss; a store refuses anything but an Edges-routed
//!   directive, refuses a delta touching a `CacheMarker::Deny` field, and
//!   logs a backend error instead of failing the run.
//! - [`NodeCacheConfig`] is the operator's side (`APP_NODE_CACHE_*`), off
//!   by default; per-node policies are code.
//!
//! A cached delta is merged exactly as the original was, so a hit on a node
//! writing an `Append` field appends again (and so does a Chronicle fork
//! that hits). Mark such a field `CacheMarker::Deny` to keep it out of the
//! cache: a cached Paladin node whose output field is Deny fails validation
//! (`CacheOutputFieldDenied`), and a Function delta touching one is never
//! stored.
//!
//! # How the engine uses it
//!
//! Before attempt 1 of a cached node, outside the interceptor chain; after a
//! successful attempt of the node itself (not a handler's outcome). The
//! key derivation and the handle are internals, reachable only through the
//! `__internal` feature for the property tests and benches; this is what
//! they do:
//!
//! ```
//! use aegis_runtime::__internal::{StoreOutcome, NodeCacheHandle, derive_key, initial_state};
//! use aegis_runtime::cache::{CacheKey, InMemoryNodeCache};
//! use aegis_runtime::graph::{Directive, InputMapping, NodeSpec};
//! use aegis_runtime::id::NodeId;
//! use aegis_runtime::paladin::Paladin;
//! use aegis_runtime::policy::{CacheKeySpec, CachePolicy};
//! use aegis_runtime::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta};
//! use serde_json::json;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let question = FieldName::new("question")?;
//! let answer = FieldName::new("answer")?;
//! let schema = BattlefieldSchema::new(vec![
//!     FieldSpec::new(question.clone(), DispatchRule::LastWrite, None, false),
//!     FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
//! ]);
//! let spec = NodeSpec::paladin(
//!     Paladin::new("Answerer").with_model("gpt-4o"),
//!     InputMapping::new("Answer: {question}"),
//!     answer,
//! );
//! let policy = CachePolicy::new(
//!     Duration::from_secs(15 * 60),
//!     CacheKeySpec::Fields(vec![question]),
//! );
//! let state = initial_state(&schema, &json!({"question": "why?"}))?;
//! let node = NodeId::new("answerer");
//!
//! // WarEngine::with_node_cache(backend) keeps one handle per engine.
//! let cache = NodeCacheHandle::new(Arc::new(InMemoryNodeCache::new()));
//!
//! // A key error (an input that does not render) is a miss, not stored.
//! let key = derive_key("v6:graph", &node, &spec, &policy.key, &state, None)?;
//!
//! // Miss: run the node normally ...
//! assert!(!cache.lookup(&schema, &key).await.is_hit());
//! let mut delta = StateDelta::new();
//! delta.set("answer", "because")?;
//! let directive = Directive::edges(delta);
//! // ... then store its directive after the successful attempt.
//! let stored = cache.store(&schema, &key, &directive, policy.ttl).await;
//! assert!(matches!(stored, StoreOutcome::Stored { .. }));
//!
//! // Hit: merge the stored delta with zero executions (record `cache_hit`).
//! let entry = cache.lookup(&schema, &key).await.into_hit().expect("a hit");
//! assert_eq!(entry.delta, directive.delta);
//!
//! // Invalidate one node's entries (or a graph's, with `graph_prefix`).
//! let removed = cache
//!     .backend()
//!     .invalidate_prefix(&CacheKey::node_prefix("v6:graph", &node))
//!     .await?;
//! assert_eq!(removed, 1);
//! # Ok(()) }
//! ```
//!
//! Validation (the engine's side): `cache::validate::cache_problems` yields
//! `CacheKeyFieldUndeclared` and `CacheOutputFieldDenied`; an engine without
//! a backend raises `CachePolicyWithoutCacheBackend` naming every cached
//! node.

mod backend;
mod ceiling;
mod clock;
mod config;
mod entry;
pub(crate) mod handle;
pub(crate) mod key;
mod memory;
#[cfg(feature = "redis-cache")]
mod redis;
pub(crate) mod validate;

#[cfg(test)]
mod contract;
#[cfg(test)]
#[cfg(feature = "redis-cache")]
mod redis_faults;

pub use backend::{NodeCache, NodeCacheError};
pub use ceiling::TtlCeiling;
pub use clock::{CacheClock, ManualClock};
pub use config::{NodeCacheBackend, NodeCacheConfig};
pub use entry::CacheEntry;
pub(crate) use handle::{CacheLookup, NodeCacheHandle};
pub use key::{CACHE_KEY_VERSION, CacheKey, CacheKeyError};
pub(crate) use key::{GraphKeySeed, KeySeed, derive_key_seeded};
pub use memory::InMemoryNodeCache;
#[cfg(feature = "redis-cache")]
pub use redis::{RedisNodeCache, RedisNodeCacheBuilder};
pub use validate::EntryMisfit;
