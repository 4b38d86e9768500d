//! A thread's waypoints with every error text redacted, for the pages and
//! the timeline: a provider may echo a credential in its error body, and a
//! waypoint keeps what the node reported.

use crate::error::{NodeError, NodeErrorSource, redact_secrets};
use crate::waypoint::{Waypoint, WaypointStatus};

fn source(s: &mut NodeErrorSource) {
    match s {
        NodeErrorSource::Paladin { message, .. }
        | NodeErrorSource::Llm { message, .. }
        | NodeErrorSource::Function { message }
        | NodeErrorSource::Panic { message }
        | NodeErrorSource::Battalion { message, .. }
        | NodeErrorSource::Interceptor { message } => *message = redact_secrets(message),
        _ => {}
    }
}

fn error(e: &mut NodeError) {
    source(&mut e.source);
}

/// `history` with the error texts of its records, handled failures and
/// statuses redacted.
pub(crate) fn redacted(mut history: Vec<Waypoint>) -> Vec<Waypoint> {
    for w in &mut history {
        for r in &mut w.records {
            for a in &mut r.attempts {
                error(&mut a.error);
            }
        }
        for h in &mut w.handled {
            error(&mut h.error);
        }
        match &mut w.status {
            WaypointStatus::Failed {
                error: text,
                node_error,
            } => {
                *text = redact_secrets(text);
                if let Some(e) = node_error {
                    error(e);
                }
            }
            WaypointStatus::Halted { reason } => *reason = redact_secrets(reason),
            _ => {}
        }
    }
    history
}
