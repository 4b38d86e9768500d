//! What a waypoint keeps of a fallback hop.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Transience;

/// A fallback chain moved from one provider to the next inside a Paladin
/// node's attempt: kept on the attempt's
/// [`NodeExecutionRecord::hops`](crate::waypoint::NodeExecutionRecord::hops),
/// so a run read from its waypoints alone (the console, a timeline drawn
/// without a trace) still shows the hop when the call then succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HopNote {
    /// The attempt of the node it happened in, 1-based.
    pub attempt: u32,
    /// The provider that failed.
    pub from_provider: String,
    /// The provider tried next.
    pub to_provider: String,
    /// The chain position of [`to_provider`](Self::to_provider) (the
    /// primary is 0).
    pub position: usize,
    /// Whether the failure that caused the hop was transient.
    pub transience: Transience,
    /// Why: the failure's kind and its redacted, bounded message.
    pub reason: String,
}

impl HopNote {
    /// In attempt `attempt`, `from_provider` failed (`transience`, for
    /// `reason`, already redacted) and the chain moved on to
    /// `to_provider` at chain position `position`.
    pub fn new(
        attempt: u32,
        from_provider: impl Into<String>,
        to_provider: impl Into<String>,
        position: usize,
        transience: Transience,
        reason: impl Into<String>,
    ) -> Self {
        HopNote {
            attempt,
            from_provider: from_provider.into(),
            to_provider: to_provider.into(),
            position,
            transience,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for HopNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hop `{}` → `{}` (position {}): {} ({})",
            self.from_provider, self.to_provider, self.position, self.reason, self.transience
        )
    }
}
