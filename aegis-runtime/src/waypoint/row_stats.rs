//! How big the stored rows of a thread are, for capacity planning.

/// The stored size of one waypoint row of a durable store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaypointRowStats {
    /// The waypoint's sequence number.
    pub seq: u64,
    /// Whether the row holds the whole state (a snapshot) rather than what
    /// its superstep changed (a delta).
    pub snapshot: bool,
    /// The encoded waypoint's size in bytes.
    pub payload_bytes: u64,
}
