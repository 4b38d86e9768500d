//! `InMemoryEffectLedger`: the effect ledger of the in-memory store, which
//! applies the ledger's state machine ([`EffectEntry`]'s transitions) to a
//! map.

use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::StoreError;
use crate::graph::{EffectEntry, EffectLedger, EffectOp, EffectStart};
use crate::id::validate_thread_id;

/// Effects in process memory: the ledger of
/// [`InMemoryWaypointStore`](super::InMemoryWaypointStore), or of a
/// detached [`NodeContext`](crate::graph::NodeContext) in a node's unit
/// test.
#[derive(Debug, Default)]
pub struct InMemoryEffectLedger {
    entries: Mutex<BTreeMap<String, EffectEntry>>,
}

impl InMemoryEffectLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `op` to the entry of `key`; returns the entry as it was.
    pub(crate) fn apply(&self, key: &str, op: &EffectOp) -> Option<EffectEntry> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let before = entries.get(key).cloned();
        if let Some(after) = EffectEntry::step(before.as_ref(), op)
            && Some(&after) != before.as_ref()
        {
            entries.insert(key.to_string(), after);
        }
        before
    }

    pub(crate) fn list(&self, thread_id: &str) -> Vec<EffectEntry> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .values()
            .filter(|e| e.thread_id == thread_id)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl EffectLedger for InMemoryEffectLedger {
    async fn begin(&self, start: &EffectStart) -> Result<Option<EffectEntry>, StoreError> {
        validate_thread_id(&start.thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self.apply(&start.key, &EffectOp::Begin(start.clone())))
    }

    async fn restart(&self, key: &str) -> Result<(), StoreError> {
        self.apply(key, &EffectOp::Restart);
        Ok(())
    }

    async fn finish(&self, key: &str, result: &Value) -> Result<(), StoreError> {
        self.apply(key, &EffectOp::Finish(result.clone()));
        Ok(())
    }

    async fn entries(&self, thread_id: &str) -> Result<Vec<EffectEntry>, StoreError> {
        Ok(self.list(thread_id))
    }
}
