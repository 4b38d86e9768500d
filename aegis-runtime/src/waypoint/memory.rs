//! `InMemoryWaypointStore`: waypoints kept in process memory.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

use super::{Waypoint, WaypointStore};
use crate::error::StoreError;
use crate::id::validate_thread_id;

/// Waypoints in process memory: for tests, demos and short-lived runs.
///
/// Snapshots share unchanged values, so keeping every waypoint of a long run
/// costs in proportion to the deltas, not to the state times the supersteps.
#[derive(Debug, Default)]
pub struct InMemoryWaypointStore {
    threads: Mutex<HashMap<String, Thread>>,
}

/// Waypoints per chunk of a thread's history.
const CHUNK: usize = 64;

/// One thread's waypoints, in chunks that are never moved once filled: a
/// waypoint is a few hundred bytes, and a growing `Vec` of them would copy
/// every one again each time it doubled.
#[derive(Debug, Default)]
struct Thread {
    chunks: Vec<Vec<Waypoint>>,
    len: u64,
}

impl Thread {
    /// Appends `waypoint`, if it is the thread's next one.
    fn append(&mut self, waypoint: Waypoint) -> Result<(), StoreError> {
        if waypoint.seq != self.len {
            return Err(StoreError::Conflict {
                thread_id: waypoint.thread_id.to_string(),
                expected_seq: waypoint.seq,
                actual_next: self.len,
            });
        }
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(waypoint),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(waypoint);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        Ok(())
    }

    fn latest(&self) -> Option<&Waypoint> {
        self.chunks.last().and_then(|c| c.last())
    }

    fn history(&self) -> Vec<Waypoint> {
        self.chunks.iter().flatten().cloned().collect()
    }
}

impl InMemoryWaypointStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// `put`, which never waits.
    fn append(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        validate_thread_id(&waypoint.thread_id).map_err(StoreError::InvalidThreadId)?;
        let mut threads = self.lock()?;
        // Found without cloning the id: every superstep writes here.
        if let Some(thread) = threads.get_mut(waypoint.thread_id.as_str()) {
            return thread.append(waypoint);
        }
        let thread = threads.entry(waypoint.thread_id.to_string()).or_default();
        thread.append(waypoint)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Thread>>, StoreError> {
        self.threads
            .lock()
            .map_err(|_| StoreError::Backend("in-memory store lock poisoned".to_string()))
    }
}

#[async_trait]
impl WaypointStore for InMemoryWaypointStore {
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        self.append(waypoint)
    }

    #[allow(clippy::result_large_err)] // see WaypointStore::try_put
    fn try_put(&self, waypoint: Waypoint) -> Result<Result<(), StoreError>, Waypoint> {
        Ok(self.append(waypoint))
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self
            .lock()?
            .get(thread_id)
            .and_then(Thread::latest)
            .cloned())
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self
            .lock()?
            .get(thread_id)
            .map(Thread::history)
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Battlefield;
    use crate::waypoint::WaypointStatus;

    fn at(seq: u64) -> Waypoint {
        Waypoint::new("t", seq, WaypointStatus::Running, Battlefield::new())
    }

    #[tokio::test]
    async fn keeps_order_across_chunks_and_refuses_a_gap() {
        let store = InMemoryWaypointStore::new();
        let n = 3 * CHUNK as u64 + 5;
        for seq in 0..n {
            store.put(at(seq)).await.unwrap();
        }
        let history = store.history("t").await.unwrap();
        assert_eq!(
            history.iter().map(|w| w.seq).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        assert_eq!(store.latest("t").await.unwrap().map(|w| w.seq), Some(n - 1));
        for seq in [n - 1, n + 1] {
            assert!(matches!(
                store.put(at(seq)).await,
                Err(StoreError::Conflict { actual_next, .. }) if actual_next == n
            ));
        }
    }
}
