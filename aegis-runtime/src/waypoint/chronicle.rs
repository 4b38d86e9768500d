//! `Chronicle`: reading a thread's waypoints and forking a new thread from one.

use std::sync::Arc;

use super::{Waypoint, WaypointStore};
use crate::error::EngineError;
use crate::id::validate_root_thread_id;

/// A thread's history, and forks from any point of it.
#[derive(Debug)]
pub struct Chronicle<S> {
    store: Arc<S>,
}

impl<S: WaypointStore> Chronicle<S> {
    /// A chronicle over `store`.
    pub fn new(store: Arc<S>) -> Self {
        Chronicle { store }
    }

    /// Every waypoint of `thread_id`, oldest first.
    pub async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, EngineError> {
        Ok(self.store.history(thread_id).await?)
    }

    /// Starts `new_thread` as a copy of `thread_id` up to and including
    /// waypoint `seq`; `WarEngine::resume(graph, new_thread, None)` then runs
    /// it on from there. Returns the fork's latest waypoint.
    ///
    /// `new_thread` follows the rules of `WarEngine::start`: a thread id no
    /// store can hold, or one containing `>` (reserved for Battalion child
    /// threads), is [`EngineError::InvalidThreadId`] and nothing is written.
    pub async fn fork(
        &self,
        thread_id: &str,
        seq: u64,
        new_thread: &str,
    ) -> Result<Waypoint, EngineError> {
        validate_root_thread_id(new_thread)?;
        if self.store.latest(new_thread).await?.is_some() {
            return Err(EngineError::ThreadAlreadyExists {
                thread_id: new_thread.to_string(),
            });
        }
        let history = self.store.history(thread_id).await?;
        if history.is_empty() {
            return Err(EngineError::ThreadNotFound {
                thread_id: thread_id.to_string(),
            });
        }
        if seq >= history.len() as u64 {
            return Err(EngineError::WaypointNotFound {
                thread_id: thread_id.to_string(),
                seq,
            });
        }
        let mut last = None;
        for mut w in history.into_iter().take(seq as usize + 1) {
            w.thread_id = new_thread.into();
            self.store.put(w.clone()).await?;
            last = Some(w);
        }
        last.ok_or_else(|| EngineError::ThreadNotFound {
            thread_id: thread_id.to_string(),
        })
    }
}
