//! `InMemoryNodeCache`: a bounded, process-local node cache.

use async_trait::async_trait;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use super::{CacheClock, CacheEntry, CacheKey, NodeCache, NodeCacheError, TtlCeiling};

/// A process-local node cache holding at most a fixed number of entries.
///
/// A `put` encodes the entry to its stored byte form
/// ([`CacheEntry::to_bytes`], the bytes the Redis backend stores) and keeps
/// what those bytes decode to, so a hit replays exactly what a shared
/// backend would (and fails alike to encode), without decoding on every
/// hit: the engine's lookups are served the decoded entry itself, shared,
/// and answered in place, without a future. Lookups are one hash-map probe, and a `put`'s bookkeeping O(log n), however many
/// entries are held. When full, a `put` first drops expired entries,
/// then the oldest stored ones, so a long-lived process cannot grow without
/// limit; expired entries are also dropped as later `put`s pass them.
///
/// ```
/// use aegis_runtime::cache::{InMemoryNodeCache, NodeCache};
/// use std::sync::Arc;
///
/// let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new().with_max_entries(1_000));
/// # let _ = cache;
/// ```
pub struct InMemoryNodeCache {
    store: Mutex<Store>,
    clock: CacheClock,
    max_entries: usize,
}

struct Slot {
    /// The stored bytes, decoded once; an error for bytes that do not
    /// decode (only [`InMemoryNodeCache::plant_raw`] stores such), which
    /// every read reports as a miss, as a shared backend would.
    entry: Result<Arc<CacheEntry>, NodeCacheError>,
    expires_at: SystemTime,
    seq: u64,
}

#[derive(Default)]
struct Store {
    /// By key: a derived key hashes and compares as its bytes, never as
    /// text, hashed with a key of this cache's own (see [`KeyedFold`]).
    slots: HashMap<CacheKey, Slot, KeyedFold>,
    /// Expiry order, for dropping expired entries without a scan.
    by_expiry: BTreeMap<(SystemTime, u64), CacheKey>,
    /// Storage order, for dropping the oldest entries when full.
    by_age: BTreeMap<u64, CacheKey>,
    next_seq: u64,
}

/// The hash of the slots' map: each 8 bytes a key hashes (16 of a derived
/// key's digest) folded in by a 128-bit multiply with a random key drawn
/// per cache. A derived key's digest is already uniform, so this is all the
/// mixing it needs, far cheaper than a general-purpose hash; the random key keeps anyone who cannot read it from aiming keys at a bucket.
#[derive(Clone)]
struct KeyedFold {
    seed: u64,
    key: u64,
}

impl Default for KeyedFold {
    fn default() -> Self {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new();
        KeyedFold {
            seed: random.hash_one(0u8),
            // Odd, so no multiply by it loses a bit.
            key: random.hash_one(1u8) | 1,
        }
    }
}

impl std::hash::BuildHasher for KeyedFold {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher {
            state: self.seed,
            key: self.key,
        }
    }
}

struct FoldHasher {
    state: u64,
    key: u64,
}

fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl std::hash::Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.state = fold(self.state ^ u64::from_le_bytes(word), self.key);
        }
        // The length, so a short text and its zero-padded form differ.
        self.state = fold(self.state ^ bytes.len() as u64, self.key);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

impl Store {
    fn remove(&mut self, key: &CacheKey) -> bool {
        match self.slots.remove(key) {
            Some(slot) => {
                self.by_expiry.remove(&(slot.expires_at, slot.seq));
                self.by_age.remove(&slot.seq);
                true
            }
            None => false,
        }
    }

    fn drop_expired(&mut self, now: SystemTime) {
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.remove(&key);
        }
    }

    fn drop_oldest(&mut self) {
        if let Some((_, key)) = self.by_age.pop_first() {
            self.remove(&key);
        }
    }

    fn insert(
        &mut self,
        key: CacheKey,
        entry: Result<Arc<CacheEntry>, NodeCacheError>,
        expires_at: SystemTime,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_expiry.insert((expires_at, seq), key.clone());
        self.by_age.insert(seq, key.clone());
        self.slots.insert(
            key,
            Slot {
                entry,
                expires_at,
                seq,
            },
        );
    }
}

impl InMemoryNodeCache {
    /// The default bound on entries.
    pub const DEFAULT_MAX_ENTRIES: usize = 10_000;

    /// An empty cache of at most [`Self::DEFAULT_MAX_ENTRIES`] entries, on
    /// its own [`CacheClock`].
    pub fn new() -> Self {
        InMemoryNodeCache {
            store: Mutex::new(Store::default()),
            clock: CacheClock::new(),
            max_entries: Self::DEFAULT_MAX_ENTRIES,
        }
    }

    /// Bounds the cache to `max_entries` (at least 1).
    pub fn with_max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries.max(1);
        self
    }

    /// Judges expiry by `clock`.
    pub fn with_clock(mut self, clock: CacheClock) -> Self {
        self.clock = clock;
        self
    }

    /// The bound on entries.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// How many entries are held, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic elsewhere while holding the lock cannot leave a slot half
        // written (every mutation completes before it can unwind), so the
        // data is still consistent.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `cache` itself when it is an `InMemoryNodeCache`, or the one a
    /// [`TtlCeiling`] wraps (the ceiling changes only what is stored, and
    /// `NodeCacheConfig` wraps the in-memory cache in one when a maximum
    /// TTL is set): the engine's handle asks once, when it is built, and
    /// then looks entries up with [`InMemoryNodeCache::lookup_at`].
    pub(crate) fn recognise(cache: &Arc<dyn NodeCache>) -> Option<Arc<Self>> {
        let any: &dyn Any = cache.as_ref();
        if let Some(ceiling) = any.downcast_ref::<TtlCeiling>() {
            return Self::recognise(ceiling.inner());
        }
        let cache: Arc<dyn Any + Send + Sync> = cache.clone();
        cache.downcast().ok()
    }

    /// The lookup itself, expiry judged at `now`: one probe under the
    /// lock, never a wait. The engine's lookups call it directly (no
    /// future, and the entry shared rather than copied); `get` copies what
    /// it serves.
    pub(crate) fn lookup_at(
        &self,
        key: &CacheKey,
        now: SystemTime,
    ) -> Result<Option<Arc<CacheEntry>>, NodeCacheError> {
        let mut store = self.lock();
        let found = match store.slots.get(key) {
            None => return Ok(None),
            // The slot's expiry is the entry's: it was stored from it.
            Some(slot) if slot.expires_at <= now => None,
            Some(slot) => Some(slot.entry.clone()),
        };
        match found {
            None => {
                store.remove(key);
                Ok(None)
            }
            Some(Ok(entry)) => Ok(Some(entry)),
            Some(Err(e)) => {
                drop(store);
                tracing::warn!(backend = "memory", key = %key, error = %e, "corrupt node cache entry treated as a miss");
                Ok(None)
            }
        }
    }

    /// Stores raw bytes as if a backend had, to test damaged entries.
    #[cfg(test)]
    pub(crate) fn plant_raw(&self, key: &CacheKey, bytes: &[u8], expires_at: SystemTime) {
        let entry = CacheEntry::from_bytes(bytes).map(Arc::new);
        let mut store = self.lock();
        store.remove(key);
        store.insert(key.clone(), entry, expires_at);
    }
}

impl Default for InMemoryNodeCache {
    fn default() -> Self {
        InMemoryNodeCache::new()
    }
}

impl fmt::Debug for InMemoryNodeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryNodeCache")
            .field("entries", &self.len())
            .field("max_entries", &self.max_entries)
            .field("clock", &self.clock)
            .finish()
    }
}

#[async_trait]
impl NodeCache for InMemoryNodeCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        Ok(self
            .lookup_at(key, self.clock.now())?
            .map(Arc::unwrap_or_clone))
    }

    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        let now = self.clock.now();
        if !entry.is_fresh_at(now) {
            return Ok(());
        }
        // Through the stored form and back, outside the lock: what a hit
        // serves is what a shared backend's would (bytes that did not
        // decode would be its miss too), and a multi-megabyte entry must
        // not stall every other lookup.
        let decoded = CacheEntry::from_bytes(&entry.to_bytes()?).map(Arc::new);
        let mut store = self.lock();
        store.remove(key);
        store.drop_expired(now);
        while store.slots.len() >= self.max_entries {
            store.drop_oldest();
        }
        store.insert(key.clone(), decoded, entry.expires_at);
        Ok(())
    }

    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        let mut store = self.lock();
        let doomed: Vec<CacheKey> = store
            .slots
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        for k in &doomed {
            store.remove(k);
        }
        Ok(doomed.len() as u64)
    }

    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        let mut store = self.lock();
        let n = store.slots.len() as u64;
        *store = Store::default();
        Ok(n)
    }

    fn clock(&self) -> Option<&CacheClock> {
        Some(&self.clock)
    }

    fn backend_name(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateDelta;
    use std::time::Duration;

    fn entry(n: u64, ttl: Duration, clock: &CacheClock) -> CacheEntry {
        let mut delta = StateDelta::new();
        delta.set("n", n).unwrap();
        CacheEntry::new(key(n), delta, clock.now() + ttl)
    }

    #[test]
    fn the_slot_hash_is_keyed_per_cache_and_sees_every_byte() {
        use std::hash::BuildHasher;
        let (a, b) = (KeyedFold::default(), KeyedFold::default());
        let text = |s: &[u8]| {
            let h = |f: &KeyedFold| {
                let mut hasher = f.build_hasher();
                std::hash::Hasher::write(&mut hasher, s);
                std::hash::Hasher::finish(&hasher)
            };
            (h(&a), h(&b))
        };
        // Two caches draw different keys, so one cache's collisions are
        // not another's.
        assert_ne!(text(b"k1").0, text(b"k1").1);
        // A trailing zero, a byte past the first word, a swapped word.
        let (ab, ab0) = (text(b"ab").0, text(b"ab\0").0);
        assert_ne!(ab, ab0);
        assert_ne!(text(b"12345678x").0, text(b"12345678y").0);
        assert_ne!(text(b"AAAAAAAABBBBBBBB").0, text(b"BBBBBBBBAAAAAAAA").0);
        // Equal bytes, equal hash: what the map relies on.
        assert_eq!(text(b"k1").0, text(b"k1").0);
    }

    fn key(n: u64) -> CacheKey {
        CacheKey::from_raw(format!("k{n}"))
    }

    #[tokio::test(start_paused = true)]
    async fn when_full_the_oldest_entry_goes() {
        let cache = InMemoryNodeCache::new().with_max_entries(3);
        let clock = cache.clock.clone();
        for n in 0..4 {
            cache
                .put(&key(n), &entry(n, Duration::from_secs(60), &clock))
                .await
                .unwrap();
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key(0)).await.unwrap(), None);
        for n in 1..4 {
            assert!(cache.get(&key(n)).await.unwrap().is_some(), "k{n}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn when_full_expired_entries_go_before_older_live_ones() {
        let cache = InMemoryNodeCache::new().with_max_entries(3);
        let clock = cache.clock.clone();
        cache
            .put(&key(0), &entry(0, Duration::from_secs(60), &clock))
            .await
            .unwrap();
        cache
            .put(&key(1), &entry(1, Duration::from_secs(1), &clock))
            .await
            .unwrap();
        cache
            .put(&key(2), &entry(2, Duration::from_secs(60), &clock))
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        cache
            .put(&key(3), &entry(3, Duration::from_secs(60), &clock))
            .await
            .unwrap();
        assert_eq!(cache.len(), 3);
        // k1 had expired; k0, although the oldest, is still live and kept.
        assert!(cache.get(&key(0)).await.unwrap().is_some());
        assert_eq!(cache.get(&key(1)).await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_dropped_as_puts_pass_them() {
        let cache = InMemoryNodeCache::new();
        let clock = cache.clock.clone();
        for n in 0..10 {
            cache
                .put(&key(n), &entry(n, Duration::from_secs(1), &clock))
                .await
                .unwrap();
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        cache
            .put(&key(99), &entry(99, Duration::from_secs(1), &clock))
            .await
            .unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn overwriting_a_key_keeps_one_entry_and_moves_it_to_the_young_end() {
        let cache = InMemoryNodeCache::new().with_max_entries(2);
        let clock = cache.clock.clone();
        let ttl = Duration::from_secs(60);
        cache.put(&key(0), &entry(0, ttl, &clock)).await.unwrap();
        cache.put(&key(1), &entry(1, ttl, &clock)).await.unwrap();
        cache.put(&key(0), &entry(10, ttl, &clock)).await.unwrap();
        assert_eq!(cache.len(), 2);
        cache.put(&key(2), &entry(2, ttl, &clock)).await.unwrap();
        assert_eq!(cache.get(&key(1)).await.unwrap(), None);
        let hit = cache.get(&key(0)).await.unwrap().unwrap();
        assert_eq!(hit.delta.get("n"), Some(&serde_json::json!(10)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hit_serves_the_entry_decoded_at_put_without_decoding_it_again() {
        let cache = InMemoryNodeCache::new();
        let clock = cache.clock.clone();
        let stored = entry(7, Duration::from_secs(60), &clock);
        cache.put(&key(7), &stored).await.unwrap();
        let now = clock.now();
        let first = cache.lookup_at(&key(7), now).unwrap().unwrap();
        let second = cache.lookup_at(&key(7), now).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &second), "one decoded entry, shared");
        let replayed = CacheEntry::from_bytes(&stored.to_bytes().unwrap()).unwrap();
        assert_eq!(*first, replayed);
        assert_eq!(cache.get(&key(7)).await.unwrap(), Some(replayed));

        // Planted bytes are decoded once too: damaged ones read as a miss
        // through either call, sound ones are served.
        let far = clock.now() + Duration::from_secs(60);
        cache.plant_raw(&key(8), b"{\"format\":2,", far);
        assert_eq!(cache.lookup_at(&key(8), now).unwrap(), None);
        assert_eq!(cache.get(&key(8)).await.unwrap(), None);
        assert_eq!(cache.len(), 2, "kept until a put replaces it");
        cache.plant_raw(&key(8), &stored.to_bytes().unwrap(), far);
        assert_eq!(
            cache.lookup_at(&key(8), now).unwrap().as_deref(),
            Some(&stored)
        );
    }

    #[test]
    fn a_zero_bound_still_holds_one_entry() {
        assert_eq!(
            InMemoryNodeCache::new().with_max_entries(0).max_entries(),
            1
        );
        assert_eq!(
            InMemoryNodeCache::new().max_entries(),
            InMemoryNodeCache::DEFAULT_MAX_ENTRIES
        );
        assert!(InMemoryNodeCache::new().is_empty());
    }
}
