//! The three-valued classification every failure carries.

use serde::{Deserialize, Serialize};

/// Whether a failure is worth retrying.
///
/// Every error type the engine sees classifies itself by reading its typed
/// fields (a variant, an HTTP status as a `u16`), never by parsing a message.
/// The [`RetryPredicate`](crate::policy::RetryPredicate) of a node's policy then decides
/// which classes it retries.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): the guide's
/// classification is three-valued by definition (may succeed later, cannot,
/// nobody knows), every retry predicate and handler matches on all three,
/// and a fourth class would change what every such `match` means — a
/// breaking change that should break the build, not fall into a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Transience {
    /// The same request may well succeed later: an overloaded upstream, a
    /// dropped connection, a rate limit, a timed-out attempt.
    Transient,
    /// Resending the same request cannot succeed: a rejected credential, a
    /// malformed request, a configuration error.
    Permanent,
    /// Nothing typed says which: an untyped message, a panic.
    Unknown,
}

impl std::fmt::Display for Transience {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transience::Transient => "transient",
            Transience::Permanent => "permanent",
            Transience::Unknown => "unknown",
        })
    }
}
