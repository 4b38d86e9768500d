//! A cached result and its stored byte form.

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{CacheKey, NodeCacheError};
use crate::state::StateDelta;
use crate::trace::CacheOrigin;

/// The stored form's version; an entry of any other version reads as corrupt
/// (a miss), never as a wrongly shaped delta. Version 2 added the key the
/// entry was stored under. The optional `origin` joined version 2 without a
/// bump: an entry without it reads with `origin: None`, and a reader that
/// predates it ignores it.
const ENTRY_FORMAT: u32 = 2;

/// One cached node result: the delta a successful, Edges-routed attempt
/// returned, the key it was stored under, and the instant it stops being
/// served.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CacheEntry {
    /// The key the entry was stored under. The engine serves an entry only
    /// under this key: one found under any other (copied by another
    /// process, or planted) is a miss.
    pub key: CacheKey,
    /// The delta merged on a hit, exactly as the original attempt's was.
    pub delta: StateDelta,
    /// A hard expiry with a closed boundary: read at exactly this instant,
    /// the entry is a miss.
    pub expires_at: SystemTime,
    /// Who produced the result; `None` for an entry stored before entries
    /// recorded it, or stored without one.
    /// Shared: a hit hands it to its record without copying its strings.
    pub origin: Option<Arc<CacheOrigin>>,
}

#[derive(Serialize)]
struct WireOut<'a> {
    format: u32,
    key: &'a str,
    expires_at: SystemTime,
    delta: &'a StateDelta,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'a CacheOrigin>,
}

#[derive(Deserialize)]
struct WireIn {
    key: String,
    expires_at: SystemTime,
    delta: StateDelta,
    #[serde(default)]
    origin: Option<CacheOrigin>,
}

/// Just the version, read first, so an entry of another format is reported
/// as such rather than as whatever field it lacks.
#[derive(Deserialize)]
struct WireFormat {
    format: u32,
}

impl CacheEntry {
    /// An entry of `delta`, stored under `key`, expiring at `expires_at`.
    pub fn new(key: CacheKey, delta: StateDelta, expires_at: SystemTime) -> Self {
        CacheEntry {
            key,
            delta,
            expires_at,
            origin: None,
        }
    }

    /// This entry, recording who produced it.
    pub fn with_origin(mut self, origin: Option<CacheOrigin>) -> Self {
        self.origin = origin.map(Arc::new);
        self
    }

    /// Whether the entry may be served at `now`: strictly before its expiry.
    pub fn is_fresh_at(&self, now: SystemTime) -> bool {
        now < self.expires_at
    }

    /// How long the entry stays fresh after `now`; `None` once it is not.
    pub fn remaining_at(&self, now: SystemTime) -> Option<Duration> {
        self.expires_at
            .duration_since(now)
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// The stored form: versioned JSON of the key, the expiry and the
    /// delta. Both built-in backends store exactly these bytes, so they
    /// fail alike on a damaged entry.
    pub fn to_bytes(&self) -> Result<Vec<u8>, NodeCacheError> {
        serde_json::to_vec(&WireOut {
            format: ENTRY_FORMAT,
            key: &self.key.text(),
            expires_at: self.expires_at,
            delta: &self.delta,
            origin: self.origin.as_deref(),
        })
        .map_err(|e| NodeCacheError::Encode {
            message: e.to_string(),
        })
    }

    /// Reads the stored form back; anything else is
    /// [`NodeCacheError::CorruptEntry`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NodeCacheError> {
        let corrupt = |e: serde_json::Error| NodeCacheError::CorruptEntry {
            message: e.to_string(),
        };
        let version: WireFormat = serde_json::from_slice(bytes).map_err(corrupt)?;
        if version.format != ENTRY_FORMAT {
            return Err(NodeCacheError::CorruptEntry {
                message: format!(
                    "entry format {} is not the supported format {ENTRY_FORMAT}",
                    version.format
                ),
            });
        }
        let wire: WireIn = serde_json::from_slice(bytes).map_err(corrupt)?;
        Ok(CacheEntry {
            key: CacheKey::from_raw(wire.key),
            // Served on every hit: cloning it must not copy it.
            delta: wire.delta.into_shared(),
            expires_at: wire.expires_at,
            origin: wire.origin.map(Arc::new),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> CacheEntry {
        let mut delta = StateDelta::new();
        delta
            .set("answer", json!({"text": "42", "n": [1, 2.5, null]}))
            .unwrap();
        CacheEntry::new(
            CacheKey::from_raw("v1:abc:def:0123"),
            delta,
            SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
        )
    }

    #[test]
    fn round_trips_with_its_key_and_nanosecond_expiry() {
        let e = entry();
        let back = CacheEntry::from_bytes(&e.to_bytes().unwrap()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.key.text(), "v1:abc:def:0123");
    }

    #[test]
    fn the_origin_round_trips_and_an_entry_without_one_still_reads() {
        let origin = CacheOrigin {
            node_id: crate::id::NodeId::new("answer"),
            task_key: Some("k1".into()),
            thread_id: Some("t1".into()),
            attempt: 2,
            served_by: Some("ollama".into()),
            model: Some("llama3.2".into()),
            chain_position: Some(1),
            fallback: true,
            scope: crate::policy::CacheScope::Node,
        };
        let e = entry().with_origin(Some(origin));
        assert_eq!(CacheEntry::from_bytes(&e.to_bytes().unwrap()).unwrap(), e);

        // Bytes as a build before origins wrote them.
        let old = b"{\"format\":2,\"key\":\"k\",\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{}}}";
        let read = CacheEntry::from_bytes(old).unwrap();
        assert_eq!(read.origin, None);
        assert_eq!(
            read.to_bytes().unwrap(),
            old.to_vec(),
            "written back unchanged"
        );
    }

    #[test]
    fn the_boundary_is_closed() {
        let e = entry();
        let one_ns = Duration::from_nanos(1);
        assert!(e.is_fresh_at(e.expires_at - one_ns));
        assert!(!e.is_fresh_at(e.expires_at));
        assert!(!e.is_fresh_at(e.expires_at + one_ns));
        assert_eq!(e.remaining_at(e.expires_at - one_ns), Some(one_ns));
        assert_eq!(e.remaining_at(e.expires_at), None);
        assert_eq!(e.remaining_at(e.expires_at + one_ns), None);
    }

    #[test]
    fn damaged_or_foreign_bytes_are_corrupt_not_a_panic() {
        for bytes in [
            &b"not json"[..],
            b"",
            b"{\"format\":2}",
            b"{\"format\":3,\"key\":\"k\",\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{}}}",
            b"{\"format\":2,\"key\":\"k\",\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{\"bad name\":1}}}",
            // Format 2 without its key.
            b"{\"format\":2,\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{}}}",
            // A format-1 entry, written before entries recorded their key.
            b"{\"format\":1,\"expires_at\":{\"secs_since_epoch\":1,\"nanos_since_epoch\":0},\"delta\":{\"writes\":{}}}",
            &[0xff, 0xfe, 0x00],
        ] {
            assert!(
                matches!(
                    CacheEntry::from_bytes(bytes),
                    Err(NodeCacheError::CorruptEntry { .. })
                ),
                "{bytes:?}"
            );
        }
    }
}
