//! The effect ledger: what a store remembers of each side effect a node
//! makes, and the one state machine every store's ledger follows.
//!
//! An effect is recorded as [`EffectState::Started`] before its call and as
//! [`EffectState::Done`] with its result after it. The transitions:
//!
//! | entry       | `begin`                        | `restart`        | `finish(r)`      |
//! |-------------|--------------------------------|------------------|------------------|
//! | none        | Started (starts 1): *fresh*    | none             | none             |
//! | Started (n) | unchanged: *unknown outcome*   | Started (n + 1)  | Done (r)         |
//! | Done (r)    | unchanged: *replay r*          | unchanged        | unchanged        |
//!
//! So only one `begin` per key is ever fresh, a done effect's result never
//! changes, and calling again after an unknown outcome is always an explicit
//! `restart` (which the policy decided on). [`EffectEntry::step`] is the
//! table; the in-memory ledger applies it, the SQL ledgers express each
//! column of it as one statement, and the property tests hold every ledger
//! to it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StoreError;

/// Where an effect is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EffectState {
    /// Recorded before its call; no result recorded yet. Seen again by a
    /// later attempt, this is an unknown outcome.
    Started,
    /// Its result is recorded; every later execution returns it.
    Done,
}

impl EffectState {
    /// The state's stored name: `started` or `done`.
    pub fn name(self) -> &'static str {
        match self {
            EffectState::Started => "started",
            EffectState::Done => "done",
        }
    }

    /// The state a stored name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "started" => Some(EffectState::Started),
            "done" => Some(EffectState::Done),
            _ => None,
        }
    }
}

/// Who starts an effect: its key and what it is, recorded with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectStart {
    /// The idempotency key.
    pub key: String,
    /// The thread whose node makes the effect.
    pub thread_id: String,
    /// The node.
    pub node_id: String,
    /// The effect's name within the node.
    pub name: String,
}

impl EffectStart {
    /// The start of effect `name` of `node_id` on `thread_id`, keyed `key`.
    pub fn new(
        key: impl Into<String>,
        thread_id: impl Into<String>,
        node_id: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        EffectStart {
            key: key.into(),
            thread_id: thread_id.into(),
            node_id: node_id.into(),
            name: name.into(),
        }
    }
}

/// One effect as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EffectEntry {
    /// The idempotency key.
    pub key: String,
    /// The thread whose node made the effect.
    pub thread_id: String,
    /// The node.
    pub node_id: String,
    /// The effect's name within the node.
    pub name: String,
    /// Started or done.
    pub state: EffectState,
    /// How many times it was started: 1, plus one per call made again
    /// after an unknown outcome.
    pub starts: u32,
    /// The recorded result (secrets redacted), once done.
    pub result: Option<Value>,
}

/// What one ledger operation does to an entry (see the module's table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EffectOp {
    Begin(EffectStart),
    Restart,
    Finish(Value),
}

impl EffectEntry {
    /// A fresh entry for `start`.
    pub(crate) fn started(start: &EffectStart) -> Self {
        EffectEntry {
            key: start.key.clone(),
            thread_id: start.thread_id.clone(),
            node_id: start.node_id.clone(),
            name: start.name.clone(),
            state: EffectState::Started,
            starts: 1,
            result: None,
        }
    }

    /// The state machine: the entry after `op` is applied to `entry`.
    pub(crate) fn step(entry: Option<&EffectEntry>, op: &EffectOp) -> Option<EffectEntry> {
        match (entry, op) {
            (None, EffectOp::Begin(start)) => Some(EffectEntry::started(start)),
            (None, _) => None,
            (Some(e), EffectOp::Restart) if e.state == EffectState::Started => {
                let mut e = e.clone();
                e.starts = e.starts.saturating_add(1);
                Some(e)
            }
            (Some(e), EffectOp::Finish(result)) if e.state == EffectState::Started => {
                let mut e = e.clone();
                e.state = EffectState::Done;
                e.result = Some(result.clone());
                Some(e)
            }
            (Some(e), _) => Some(e.clone()),
        }
    }
}

/// A durable record of side effects, kept by a waypoint store
/// ([`WaypointStore::effect_ledger`](crate::waypoint::WaypointStore::effect_ledger)).
///
/// Every write of a worker's ledger is fenced by the worker's lease: once
/// the lease is lost, each write fails with [`StoreError::LeaseLost`] and
/// writes nothing, so a stale worker cannot record a result.
#[async_trait]
pub trait EffectLedger: Send + Sync + 'static {
    /// Records `start` as started if its key has no entry, and returns the
    /// entry as it was before (`None`: this call started it).
    async fn begin(&self, start: &EffectStart) -> Result<Option<EffectEntry>, StoreError>;

    /// Counts another start of a started effect, before it is called again
    /// after an unknown outcome. A done effect is left as it is.
    async fn restart(&self, key: &str) -> Result<(), StoreError>;

    /// Records a started effect as done with `result`. A done effect keeps
    /// its first result.
    async fn finish(&self, key: &str, result: &Value) -> Result<(), StoreError>;

    /// Every effect of `thread_id`, in key order.
    async fn entries(&self, thread_id: &str) -> Result<Vec<EffectEntry>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn start() -> EffectStart {
        EffectStart::new("k", "t", "n", "charge")
    }

    #[test]
    fn only_the_first_begin_starts_and_a_result_never_changes() {
        let begun = EffectEntry::step(None, &EffectOp::Begin(start()));
        let again = EffectEntry::step(begun.as_ref(), &EffectOp::Begin(start()));
        assert_eq!(again, begun);
        let restarted = EffectEntry::step(again.as_ref(), &EffectOp::Restart);
        assert_eq!(restarted.as_ref().map(|e| e.starts), Some(2));
        let done = EffectEntry::step(restarted.as_ref(), &EffectOp::Finish(json!(1)));
        let done_again = EffectEntry::step(done.as_ref(), &EffectOp::Finish(json!(2)));
        assert_eq!(
            done_again.as_ref().and_then(|e| e.result.clone()),
            Some(json!(1))
        );
        let restart_done = EffectEntry::step(done_again.as_ref(), &EffectOp::Restart);
        assert_eq!(restart_done, done_again);
        assert_eq!(EffectEntry::step(None, &EffectOp::Restart), None);
        assert_eq!(EffectEntry::step(None, &EffectOp::Finish(json!(1))), None);
    }

    #[test]
    fn state_names_round_trip() {
        for s in [EffectState::Started, EffectState::Done] {
            assert_eq!(EffectState::from_name(s.name()), Some(s));
        }
        assert_eq!(EffectState::from_name("lost"), None);
    }
}
