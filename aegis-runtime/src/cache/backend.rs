//! The `NodeCache` trait every backend implements, and its error.

use async_trait::async_trait;
use std::any::Any;
use std::time::Duration;

use super::{CacheClock, CacheEntry, CacheKey};

/// Why a node cache operation failed.
///
/// The engine never fails a run on one: a failed `get` is a miss, a failed
/// `put` is logged. Messages never carry credentials or cached values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeCacheError {
    /// The backend could not be reached or refused the command.
    #[error("node cache backend `{backend}` is unavailable: {message}")]
    Unavailable {
        /// The backend.
        backend: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The backend did not answer within its command timeout.
    #[error("node cache `{operation}` timed out after {after:?}")]
    Timeout {
        /// The operation (`get`, `put`, `scan`, ...).
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// A stored entry could not be read back. Backends report it as a miss;
    /// this variant is what [`CacheEntry::from_bytes`] returns.
    #[error("corrupt node cache entry: {message}")]
    CorruptEntry {
        /// What was wrong with it.
        message: String,
    },
    /// An entry could not be encoded for storage.
    #[error("node cache entry cannot be encoded: {message}")]
    Encode {
        /// The encoder's message.
        message: String,
    },
    /// The backend cannot be built as configured.
    #[error("node cache misconfigured: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
}

/// A store of node results, shared by every run of an engine
/// (`WarEngine::with_node_cache`).
///
/// The contract every backend keeps, checked by one shared test suite:
///
/// - `get` returns an entry only strictly before its `expires_at` by the
///   backend's [`clock`](NodeCache::clock); at exactly `expires_at` it is a
///   miss. The engine re-checks whatever a backend serves, so a backend with
///   a laxer clock can never serve a stale hit.
/// - A stored entry that cannot be decoded is a miss (`Ok(None)`), never an
///   error or a panic, and the next `put` under its key replaces it.
/// - `get` returns an entry as it was stored, [`CacheEntry::key`] included:
///   the engine's handle refuses (as a miss) an entry recording another key
///   than the one it was found under, and one that does not fit the
///   graph's schema, whatever the backend.
/// - `put` replaces any entry under the key; an entry whose `expires_at` has
///   already passed is not stored.
/// - `invalidate_prefix(p)` removes every entry whose key text starts with
///   `p` (see [`CacheKey::graph_prefix`] and [`CacheKey::node_prefix`]);
///   `invalidate_all` removes every entry of this cache. Both return how
///   many entries they removed.
/// - Concurrent callers are safe; concurrent `put`s under one key leave one
///   of the written entries, whole.
///
/// A backend of your own implements `get`, `put`, `invalidate_prefix` and
/// `invalidate_all`; `clock` and `backend_name` have defaults. `Any` is
/// there for the engine, which recognises its own in-memory cache by it
/// when it is handed one: every `'static` type is `Any` already, so a
/// backend has nothing to do for it.
#[async_trait]
pub trait NodeCache: Any + Send + Sync {
    /// The fresh entry under `key`, if any.
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError>;

    /// Stores `entry` under `key` until its `expires_at`.
    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError>;

    /// Removes every entry whose key starts with `prefix`.
    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError>;

    /// Removes every entry.
    async fn invalidate_all(&self) -> Result<u64, NodeCacheError>;

    /// The clock this backend judges expiry by, when it has one. The engine
    /// adopts it so that it and the backend agree on every boundary.
    fn clock(&self) -> Option<&CacheClock> {
        None
    }

    /// A short name for logs.
    fn backend_name(&self) -> &'static str {
        "custom"
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(NodeCache);
