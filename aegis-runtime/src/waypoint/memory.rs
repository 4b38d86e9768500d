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
    threads: Mutex<HashMap<String, Vec<Waypoint>>>,
}

impl InMemoryWaypointStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<Waypoint>>>, StoreError> {
        self.threads
            .lock()
            .map_err(|_| StoreError::Backend("in-memory store lock poisoned".to_string()))
    }
}

/// Appends `waypoint` to its thread, if it is the thread's next one.
fn append(thread: &mut Vec<Waypoint>, waypoint: Waypoint) -> Result<(), StoreError> {
    let next = thread.len() as u64;
    if waypoint.seq != next {
        return Err(StoreError::Conflict {
            thread_id: waypoint.thread_id,
            expected_seq: waypoint.seq,
            actual_next: next,
        });
    }
    thread.push(waypoint);
    Ok(())
}

#[async_trait]
impl WaypointStore for InMemoryWaypointStore {
    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        validate_thread_id(&waypoint.thread_id).map_err(StoreError::InvalidThreadId)?;
        let mut threads = self.lock()?;
        // Found without cloning the id: every superstep writes here.
        if let Some(thread) = threads.get_mut(waypoint.thread_id.as_str()) {
            return append(thread, waypoint);
        }
        let thread = threads.entry(waypoint.thread_id.clone()).or_default();
        append(thread, waypoint)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self.lock()?.get(thread_id).and_then(|t| t.last().cloned()))
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self.lock()?.get(thread_id).cloned().unwrap_or_default())
    }
}
