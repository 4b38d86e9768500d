//! The stored form of a waypoint: one versioned JSON row per waypoint,
//! holding either the whole state (a snapshot) or only what the superstep
//! changed since the row before (a delta).
//!
//! Deltas keep a row in proportion to the superstep's writes: a field the
//! superstep did not touch is not stored again, and a list that grew is
//! stored as its new suffix. A snapshot now and then keeps reading the
//! latest waypoint bounded (see [`SnapshotRule`]).
//!
//! Changing anything here that changes the bytes is a format change: bump
//! [`WAYPOINT_FORMAT_VERSION`], keep decoding the old format, and regenerate
//! the checked-in fixture (`tests/fixtures/waypoint_format_v{N}.jsonl`).
//!
//! Format 2 added the graph manifest (stored with the fingerprint, so once
//! per snapshot and whenever the graph changes) and `previous_graph`; a
//! format 1 row reads as having neither.

use imbl::Vector;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::tips::Tip;
use super::{
    Activation, CompletedActivation, ParleyDelivery, PreviousGraph, Waypoint, WaypointStatus,
};
use crate::error::StoreError;
use crate::graph::GraphManifest;
use crate::id::GraphFingerprint;
use crate::state::{
    Battlefield, BattlefieldSchema, DispatchRule, FieldName, FieldSpec, StateDelta, Writer, merge,
};
use crate::waypoint::{HandledFailure, NodeExecutionRecord, Visits};

/// The waypoint serialization format this build writes, and the newest it
/// reads. A stored row of a newer format is [`StoreError::UnsupportedFormat`].
pub const WAYPOINT_FORMAT_VERSION: u32 = 2;

/// When a durable store writes a full snapshot instead of a delta.
///
/// A snapshot is written for a thread's first row, once the deltas since the
/// last snapshot add up to as many bytes as that snapshot (so all rows
/// together stay within twice the deltas' size, and reading the latest
/// waypoint reads at most about twice the state), and at the latest after
/// `max_chain` deltas (so reading it decodes a bounded number of rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SnapshotRule {
    pub(crate) max_chain: u32,
}

impl SnapshotRule {
    fn wants_snapshot(&self, base: Option<&Tip>) -> bool {
        match base {
            None => true,
            Some(t) => t.chain_len >= self.max_chain || t.chain_bytes >= t.snapshot_bytes,
        }
    }
}

/// One encoded row, ready to store.
#[derive(Debug)]
pub(crate) struct EncodedRow {
    pub(crate) payload: Vec<u8>,
    pub(crate) snapshot: bool,
    /// The thread's tip once this row is stored.
    pub(crate) tip: Tip,
}

#[derive(Serialize, Deserialize)]
struct Row {
    format: u32,
    superstep: u32,
    status: WaypointStatus,
    state: StateRow,
    vanguard: Vec<Activation>,
    interrupted: bool,
    completed: Vec<std::sync::Arc<CompletedActivation>>,
    records: Vec<NodeExecutionRecord>,
    visits: Visits,
    /// A parley answer on its way to the next superstep (absent when none;
    /// rows written before Parley existed have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parley: Option<Arc<ParleyDelivery>>,
    /// Absent in a delta row whose graph fingerprint is the previous row's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint: Option<GraphFingerprint>,
    /// The graph's manifest, beside the fingerprint when that is written
    /// (absent in format 1 rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    manifest: Option<Arc<GraphManifest>>,
    /// The graph the thread ran before a resume moved it onto this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_graph: Option<Arc<PreviousGraph>>,
    /// The thread's handled failures so far (absent when none, and in rows
    /// written before they were recorded). Stored whole: a thread compensates
    /// rarely, and each entry is one node error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    handled: Vec<HandledFailure>,
    created_at: SystemTime,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StateRow {
    Snapshot(Battlefield),
    Delta(StateChanges),
}

/// What changed between two snapshots, at the JSON level.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct StateChanges {
    /// Fields whose value is replaced.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    set: BTreeMap<FieldName, Value>,
    /// List fields that grew: the items added at the end.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    append: BTreeMap<FieldName, Vec<Value>>,
    /// Fields no longer set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    remove: Vec<FieldName>,
}

#[derive(Deserialize)]
struct Header {
    format: u32,
}

/// `t` as milliseconds since the Unix epoch (negative before it), for the
/// informational `created_at_ms` column.
pub(crate) fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Encodes `waypoint` as the row after `base` (the thread's stored tip, when
/// it is the row just before), as a delta against it or as a snapshot.
pub(crate) fn encode(
    waypoint: Waypoint,
    base: Option<&Tip>,
    rule: SnapshotRule,
) -> Result<EncodedRow, StoreError> {
    let base = base.filter(|t| t.seq.checked_add(1) == Some(waypoint.seq));
    let snapshot = rule.wants_snapshot(base);
    let Waypoint {
        thread_id,
        seq,
        superstep,
        status,
        state,
        vanguard,
        interrupted,
        completed,
        records,
        parley,
        visits,
        fingerprint,
        manifest,
        previous_graph,
        handled,
        created_at,
    } = waypoint;
    let (state_row, row_fingerprint) = match base {
        Some(b) if !snapshot => (
            StateRow::Delta(diff(&b.state, &state)),
            (b.fingerprint != fingerprint || b.manifest != manifest).then(|| fingerprint.clone()),
        ),
        _ => (StateRow::Snapshot(state.clone()), Some(fingerprint.clone())),
    };
    let row_manifest = row_fingerprint.as_ref().and(manifest.clone());
    let row = Row {
        format: WAYPOINT_FORMAT_VERSION,
        superstep,
        status,
        state: state_row,
        vanguard: vanguard.to_vec(),
        interrupted,
        completed: completed.iter().cloned().collect(),
        records,
        visits,
        parley,
        fingerprint: row_fingerprint,
        manifest: row_manifest,
        previous_graph,
        handled,
        created_at,
    };
    let payload = serde_json::to_vec(&row).map_err(|e| StoreError::Corrupt {
        thread_id: thread_id.to_string(),
        seq,
        message: format!("cannot encode: {e}"),
    })?;
    let len = payload.len() as u64;
    let tip = match base {
        Some(b) if !snapshot => Tip {
            seq,
            state,
            fingerprint,
            manifest,
            chain_len: b.chain_len + 1,
            chain_bytes: b.chain_bytes + len,
            snapshot_bytes: b.snapshot_bytes,
        },
        _ => Tip {
            seq,
            state,
            fingerprint,
            manifest,
            chain_len: 0,
            chain_bytes: 0,
            snapshot_bytes: len,
        },
    };
    Ok(EncodedRow {
        payload,
        snapshot,
        tip,
    })
}

/// Decodes a thread's rows in order, starting at a snapshot.
#[derive(Debug)]
pub(crate) struct ChainDecoder {
    thread_id: String,
    tip: Option<Tip>,
}

impl ChainDecoder {
    /// A decoder for rows of `thread_id`.
    pub(crate) fn new(thread_id: &str) -> Self {
        ChainDecoder {
            thread_id: thread_id.to_string(),
            tip: None,
        }
    }

    /// Decodes the row `seq`, which must follow the previous one.
    pub(crate) fn push(&mut self, seq: u64, payload: &[u8]) -> Result<Waypoint, StoreError> {
        let corrupt = |message: String| StoreError::Corrupt {
            thread_id: self.thread_id.clone(),
            seq,
            message,
        };
        let header: Header = serde_json::from_slice(payload)
            .map_err(|e| corrupt(format!("no format header: {e}")))?;
        if header.format > WAYPOINT_FORMAT_VERSION {
            return Err(StoreError::UnsupportedFormat {
                thread_id: self.thread_id.clone(),
                seq,
                found: header.format,
                supported: WAYPOINT_FORMAT_VERSION,
            });
        }
        let row: Row = serde_json::from_slice(payload).map_err(|e| corrupt(e.to_string()))?;
        let len = payload.len() as u64;
        let (state, fingerprint, manifest, tip) = match row.state {
            StateRow::Snapshot(state) => {
                let fingerprint = row
                    .fingerprint
                    .ok_or_else(|| corrupt("a snapshot row without a fingerprint".into()))?;
                let manifest = row.manifest;
                let tip = Tip {
                    seq,
                    state: state.clone(),
                    fingerprint: fingerprint.clone(),
                    manifest: manifest.clone(),
                    chain_len: 0,
                    chain_bytes: 0,
                    snapshot_bytes: len,
                };
                (state, fingerprint, manifest, tip)
            }
            StateRow::Delta(changes) => {
                let base = self
                    .tip
                    .as_ref()
                    .filter(|t| t.seq.checked_add(1) == Some(seq))
                    .ok_or_else(|| corrupt("a delta row without the row before it".into()))?;
                let state = apply(&base.state, changes).map_err(corrupt)?;
                // The manifest travels with the fingerprint: a row that
                // names a fingerprint names its manifest too (or has none).
                let (fingerprint, manifest) = match row.fingerprint {
                    Some(f) => (f, row.manifest),
                    None => (base.fingerprint.clone(), base.manifest.clone()),
                };
                let tip = Tip {
                    seq,
                    state: state.clone(),
                    fingerprint: fingerprint.clone(),
                    manifest: manifest.clone(),
                    chain_len: base.chain_len + 1,
                    chain_bytes: base.chain_bytes + len,
                    snapshot_bytes: base.snapshot_bytes,
                };
                (state, fingerprint, manifest, tip)
            }
        };
        self.tip = Some(tip);
        Ok(Waypoint {
            thread_id: self.thread_id.as_str().into(),
            seq,
            superstep: row.superstep,
            status: row.status,
            state,
            vanguard: row.vanguard.into(),
            interrupted: row.interrupted,
            completed: Vector::from(row.completed).into(),
            records: row.records,
            parley: row.parley,
            visits: row.visits,
            fingerprint,
            manifest,
            previous_graph: row.previous_graph,
            handled: row.handled,
            created_at: row.created_at,
        })
    }

    /// The tip after the last row decoded.
    pub(crate) fn into_tip(self) -> Option<Tip> {
        self.tip
    }
}

/// What changed from `old` to `new`.
///
/// A field both snapshots share is skipped without looking at it; a list
/// that kept its prefix is stored as its new items only.
fn diff(old: &Battlefield, new: &Battlefield) -> StateChanges {
    let mut changes = StateChanges::default();
    for field in new.field_names() {
        let name = field.as_str();
        if new.shares_field_with(old, name) {
            continue;
        }
        // A list that only grew: read the suffix without materialising it.
        if let Some(added) = new.appended_since(old, name) {
            if !added.is_empty() {
                changes.append.insert(field.clone(), added);
            }
            continue;
        }
        let Some(now) = new.get(name) else { continue };
        let Some(before) = old.get(name) else {
            changes.set.insert(field.clone(), now.clone());
            continue;
        };
        if let (Some(old_len), Some(new_len)) = (old.list_len(name), new.list_len(name))
            && new_len >= old_len
            && let (Value::Array(before_items), Value::Array(now_items)) = (before, now)
            && now_items[..old_len] == before_items[..]
        {
            if new_len > old_len {
                changes
                    .append
                    .insert(field.clone(), now_items[old_len..].to_vec());
            }
            continue;
        }
        if before != now {
            changes.set.insert(field.clone(), now.clone());
        }
    }
    changes.remove = old
        .field_names()
        .filter(|f| !new.contains(f.as_str()))
        .cloned()
        .collect();
    changes
}

/// Applies `changes` to `base`, sharing every untouched field with it.
fn apply(base: &Battlefield, changes: StateChanges) -> Result<Battlefield, String> {
    let mut state = base.clone();
    if !changes.remove.is_empty() {
        let Value::Object(mut fields) = base.to_json() else {
            return Err("a snapshot that is not a JSON object".into());
        };
        for f in &changes.remove {
            fields.remove(f.as_str());
        }
        state = serde_json::from_value(Value::Object(fields)).map_err(|e| e.to_string())?;
    }
    if changes.set.is_empty() && changes.append.is_empty() {
        return Ok(state);
    }
    // The merge with a schema made for the occasion is how a delta is
    // applied with the public state API: `LastWrite` replaces, `Append`
    // extends the persistent list in place of copying it.
    let mut specs = Vec::with_capacity(changes.set.len() + changes.append.len());
    let mut delta = StateDelta::new();
    for (field, value) in changes.set {
        specs.push(FieldSpec::new(
            field.clone(),
            DispatchRule::LastWrite,
            None,
            false,
        ));
        delta.set(field, value).map_err(|e| e.to_string())?;
    }
    for (field, items) in changes.append {
        if delta.get(field.as_str()).is_some() {
            return Err(format!("field `{field}` is both set and appended to"));
        }
        if state.list_len(field.as_str()).is_none() {
            return Err(format!("field `{field}` is appended to but is not a list"));
        }
        specs.push(FieldSpec::new(
            field.clone(),
            DispatchRule::Append,
            None,
            false,
        ));
        delta
            .set(field, Value::Array(items))
            .map_err(|e| e.to_string())?;
    }
    merge(
        &BattlefieldSchema::new(specs),
        &state,
        [(Writer::node("aegis.waypoint_store"), &delta)],
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
