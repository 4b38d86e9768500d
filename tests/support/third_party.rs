//! A waypoint store and a node cache as a third party writes them: outside
//! the crates, from the public traits alone, each method a plain `async fn`.

use aegis::{
    async_trait,
    cache::{CacheEntry, CacheKey, NodeCache, NodeCacheError},
    error::StoreError,
    id::validate_thread_id,
    waypoint::{Waypoint, WaypointStore},
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

/// Every thread's waypoints in a `Vec`, behind one lock.
#[derive(Default)]
pub struct VecStore {
    threads: Mutex<HashMap<String, Vec<Waypoint>>>,
    puts: AtomicUsize,
}

impl VecStore {
    /// How many waypoints `put` has stored.
    pub fn puts(&self) -> usize {
        self.puts.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl WaypointStore for VecStore {
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        validate_thread_id(&waypoint.thread_id).map_err(StoreError::InvalidThreadId)?;
        let mut threads = self.threads.lock().unwrap();
        let thread = threads.entry(waypoint.thread_id.to_string()).or_default();
        let actual_next = thread.len() as u64;
        if waypoint.seq != actual_next {
            return Err(StoreError::Conflict {
                thread_id: waypoint.thread_id.to_string(),
                expected_seq: waypoint.seq,
                actual_next,
            });
        }
        thread.push(waypoint);
        self.puts.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let threads = self.threads.lock().unwrap();
        Ok(threads.get(thread_id).and_then(|t| t.last().cloned()))
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        let threads = self.threads.lock().unwrap();
        Ok(threads.get(thread_id).cloned().unwrap_or_default())
    }
}

/// Entries in a `HashMap` by key text, behind one lock, counting its calls.
#[derive(Default)]
pub struct MapCache {
    entries: Mutex<HashMap<String, CacheEntry>>,
    gets: AtomicUsize,
    puts: AtomicUsize,
}

impl MapCache {
    /// How many times `get` was called.
    pub fn gets(&self) -> usize {
        self.gets.load(Ordering::SeqCst)
    }

    /// How many times `put` was called.
    pub fn puts(&self) -> usize {
        self.puts.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl NodeCache for MapCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .get(key.text().as_ref())
            .filter(|e| e.is_fresh_at(SystemTime::now()))
            .cloned())
    }

    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        if entry.is_fresh_at(SystemTime::now()) {
            let mut entries = self.entries.lock().unwrap();
            entries.insert(key.text().into_owned(), entry.clone());
        }
        Ok(())
    }

    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        let mut entries = self.entries.lock().unwrap();
        let before = entries.len();
        entries.retain(|k, _| !k.starts_with(prefix));
        Ok((before - entries.len()) as u64)
    }

    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        let mut entries = self.entries.lock().unwrap();
        let removed = entries.len() as u64;
        entries.clear();
        Ok(removed)
    }
}
