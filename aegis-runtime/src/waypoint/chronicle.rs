//! `Chronicle`: reading a thread's waypoints and forking a new thread from one.

use std::sync::Arc;

use super::{Waypoint, WaypointStore};
use crate::error::EngineError;
use crate::id::{NodeId, validate_root_thread_id};
use crate::share::IntoShared;

/// One move of a thread onto another graph, as its history records it: a
/// resume on a changed graph (a compatible change, or one a migration
/// carried), in one process or by a worker of another version.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphMove {
    /// The first waypoint written on the new graph.
    pub seq: u64,
    /// The fingerprint the thread left.
    pub from: String,
    /// The fingerprint it moved onto.
    pub to: String,
    /// The migration that carried it, by name, when one did.
    pub migration: Option<String>,
    /// The nodes that migration renamed, `(old, new)`.
    pub mapped_nodes: Vec<(NodeId, NodeId)>,
}

/// A thread's history, and forks from any point of it.
#[derive(Debug)]
pub struct Chronicle<S> {
    store: Arc<S>,
}

impl<S: WaypointStore> Chronicle<S> {
    /// A chronicle over `store` (the store, or an `Arc` of it: see
    /// [`IntoShared`]).
    pub fn new(store: impl IntoShared<S>) -> Self {
        Chronicle {
            store: store.into_shared(),
        }
    }

    /// Every waypoint of `thread_id`, oldest first.
    pub async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, EngineError> {
        Ok(self.store.history(thread_id).await?)
    }

    /// Every move of `thread_id` onto another graph, oldest first: where
    /// its fingerprint changed, with what the first waypoint on the new
    /// graph records of the old one.
    pub async fn graph_moves(&self, thread_id: &str) -> Result<Vec<GraphMove>, EngineError> {
        let history = self.store.history(thread_id).await?;
        let mut moves = Vec::new();
        for pair in history.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if before.fingerprint == after.fingerprint {
                continue;
            }
            if let Some(p) = &after.previous_graph {
                moves.push(GraphMove {
                    seq: after.seq,
                    from: p.fingerprint.clone(),
                    to: after.fingerprint.to_string(),
                    migration: p.migration.clone(),
                    mapped_nodes: p.mapped_nodes.clone(),
                });
            }
        }
        Ok(moves)
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
