//! The last stored waypoint of each recently used thread, kept in memory so
//! the next row can be encoded as a delta against it.
//!
//! Stored rows never change once committed, so a tip at `seq` is exactly
//! row `seq` for as long as the store says the thread is at `seq + 1`, which
//! the conditional write checks. A missing or stale tip only costs a
//! snapshot, never correctness.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::id::GraphFingerprint;
use crate::state::Battlefield;

/// A thread's last row as the encoder needs it.
#[derive(Debug, Clone)]
pub(crate) struct Tip {
    pub(crate) seq: u64,
    pub(crate) state: Battlefield,
    pub(crate) fingerprint: GraphFingerprint,
    pub(crate) manifest: Option<std::sync::Arc<crate::graph::GraphManifest>>,
    /// Delta rows since the last snapshot row.
    pub(crate) chain_len: u32,
    /// Their bytes.
    pub(crate) chain_bytes: u64,
    /// The last snapshot row's bytes.
    pub(crate) snapshot_bytes: u64,
}

/// Tips of at most `capacity` threads.
#[derive(Debug)]
pub(crate) struct TipCache {
    tips: Mutex<HashMap<String, Tip>>,
    capacity: usize,
}

impl TipCache {
    pub(crate) fn new(capacity: usize) -> Self {
        TipCache {
            tips: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Tip>> {
        // A panic elsewhere cannot leave a half-written tip behind (inserts
        // are whole), so a poisoned map is still sound to use.
        self.tips.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tip to encode waypoint `seq` of `thread_id` against, if cached.
    pub(crate) fn base_for(&self, thread_id: &str, seq: u64) -> Option<Tip> {
        self.lock()
            .get(thread_id)
            .filter(|t| t.seq.checked_add(1) == Some(seq))
            .cloned()
    }

    /// Records `tip` unless a newer one is already known.
    pub(crate) fn offer(&self, thread_id: &str, tip: Tip) {
        let mut tips = self.lock();
        if let Some(current) = tips.get_mut(thread_id) {
            if current.seq < tip.seq {
                *current = tip;
            }
            return;
        }
        if tips.len() >= self.capacity {
            // Any victim will do: losing a tip only makes that thread's
            // next row a snapshot.
            if let Some(victim) = tips.keys().next().cloned() {
                tips.remove(&victim);
            }
        }
        tips.insert(thread_id.to_string(), tip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tip(seq: u64) -> Tip {
        Tip {
            seq,
            state: Battlefield::new(),
            fingerprint: "f".into(),
            manifest: None,
            chain_len: 0,
            chain_bytes: 0,
            snapshot_bytes: 1,
        }
    }

    #[test]
    fn a_tip_is_a_base_only_for_the_next_seq() {
        let cache = TipCache::new(8);
        cache.offer("t", tip(3));
        assert!(cache.base_for("t", 4).is_some());
        assert!(cache.base_for("t", 3).is_none());
        assert!(cache.base_for("t", 5).is_none());
        assert!(cache.base_for("u", 4).is_none());
    }

    #[test]
    fn an_older_tip_never_replaces_a_newer_one() {
        let cache = TipCache::new(8);
        cache.offer("t", tip(5));
        cache.offer("t", tip(4));
        assert!(cache.base_for("t", 6).is_some());
        cache.offer("t", tip(6));
        assert!(cache.base_for("t", 7).is_some());
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let cache = TipCache::new(2);
        for (i, t) in ["a", "b", "c"].into_iter().enumerate() {
            cache.offer(t, tip(i as u64));
        }
        assert_eq!(cache.lock().len(), 2);
        assert!(cache.base_for("c", 3).is_some());
    }
}
