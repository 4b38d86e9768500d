//! `TtlCeiling`: an operator's upper bound on every node's cache TTL.

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{CacheClock, CacheEntry, CacheKey, NodeCache, NodeCacheError};
use crate::share::IntoShared;

/// Wraps a backend so no entry lives longer than `ceiling` after it is
/// stored, whatever TTL the node's policy asked for.
///
/// The shortened expiry is written into the entry itself, so the engine's
/// re-check on a hit honours it too. Per-node TTLs stay code; the ceiling is
/// configuration (`APP_NODE_CACHE_MAX_TTL_SECS`).
pub struct TtlCeiling {
    inner: Arc<dyn NodeCache>,
    ceiling: Duration,
    clock: CacheClock,
}

impl TtlCeiling {
    /// Caps `inner`'s entries at `ceiling`, judged by `inner`'s clock (or a
    /// new one if it has none).
    pub fn new(inner: impl IntoShared<dyn NodeCache>, ceiling: Duration) -> Self {
        let inner = inner.into_shared();
        let clock = inner.clock().cloned().unwrap_or_default();
        TtlCeiling {
            inner,
            ceiling,
            clock,
        }
    }

    /// The ceiling.
    pub fn ceiling(&self) -> Duration {
        self.ceiling
    }

    /// The wrapped backend: a lookup through the ceiling is its lookup.
    pub(crate) fn inner(&self) -> &Arc<dyn NodeCache> {
        &self.inner
    }
}

impl fmt::Debug for TtlCeiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtlCeiling")
            .field("inner", &self.inner.backend_name())
            .field("ceiling", &self.ceiling)
            .finish()
    }
}

#[async_trait]
impl NodeCache for TtlCeiling {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        self.inner.get(key).await
    }

    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        match self.clock.now().checked_add(self.ceiling) {
            Some(latest) if entry.expires_at > latest => {
                let capped = CacheEntry {
                    expires_at: latest,
                    ..entry.clone()
                };
                self.inner.put(key, &capped).await
            }
            _ => self.inner.put(key, entry).await,
        }
    }

    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_prefix(prefix).await
    }

    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_all().await
    }

    fn clock(&self) -> Option<&CacheClock> {
        Some(&self.clock)
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::InMemoryNodeCache;
    use crate::state::StateDelta;

    #[tokio::test(start_paused = true)]
    async fn entries_are_capped_at_the_ceiling_and_shorter_ones_kept() {
        let cache = TtlCeiling::new(InMemoryNodeCache::new(), Duration::from_secs(60));
        let now = cache.clock().unwrap().now();
        let long = CacheKey::from_raw("long");
        let short = CacheKey::from_raw("short");
        cache
            .put(
                &long,
                &CacheEntry::new(
                    long.clone(),
                    StateDelta::new(),
                    now + Duration::from_secs(3600),
                ),
            )
            .await
            .unwrap();
        cache
            .put(
                &short,
                &CacheEntry::new(
                    short.clone(),
                    StateDelta::new(),
                    now + Duration::from_secs(10),
                ),
            )
            .await
            .unwrap();
        assert_eq!(
            cache.get(&long).await.unwrap().unwrap().expires_at,
            now + Duration::from_secs(60)
        );
        assert_eq!(
            cache.get(&short).await.unwrap().unwrap().expires_at,
            now + Duration::from_secs(10)
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(cache.get(&long).await.unwrap(), None);
        assert_eq!(cache.backend_name(), "memory");
        assert_eq!(cache.ceiling(), Duration::from_secs(60));
    }
}
