//! A thread's run as a timeline: one lane per node (per task for a muster),
//! each attempt a bar coloured by its outcome.

mod activation;
mod draw;
mod facts;
mod layout;
mod marks;
mod model;

use crate::trace::TraceEvent;
use crate::waypoint::Waypoint;
use model::Model;

/// The thread's waypoints as a self-contained HTML page with an inline SVG
/// timeline; see [`Timeline`] (this is `Timeline::new(waypoints).to_html()`).
///
/// ```
/// # use aegis_runtime::render;
/// let page = render::timeline(&[]);
/// assert!(page.starts_with("<!DOCTYPE html>"));
/// ```
pub fn timeline(waypoints: &[Waypoint]) -> String {
    Timeline::new(waypoints).to_html()
}

/// A thread's run drawn from its waypoints (in `seq` order, as
/// [`WaypointStore::history`](crate::waypoint::WaypointStore::history) returns them).
///
/// The page holds one lane per node, one per task for a mustered worker
/// template, in the order they first ran: by superstep, then vanguard order
/// (node id, then task index). On each lane:
///
/// - every attempt is a bar coloured by its outcome: succeeded, failed
///   transient, failed permanent, failed unknown, timed out (which bound cut
///   it), skipped (shutdown or an interceptor);
/// - the backoff wait between two attempts is a dashed line;
/// - a cache hit is a short bar of its own;
/// - a fallback hop (from the trace, see [`Timeline::with_trace`]) is a
///   marker on the attempt it happened in;
/// - a handled final failure names its handler (`→ cancel`, `absorb`, ...);
/// - a parley is a band from the waypoint that asked to the re-run that got
///   the answer (or the end of the page while it waits).
///
/// Halts and failures of the run are red lines across every lane, superstep
/// barriers faint ones. Hovering any mark shows its details (`<title>`):
/// node, task, attempt, duration, the error with its transience.
///
/// Everything a user or a provider wrote — thread id, node ids, task keys,
/// error messages, parley prompts — is HTML-escaped. The page loads nothing
/// and runs no script.
///
/// Times come from the records' wall-clock `started_at` and their measured
/// durations (on tokio's clock: a run on a paused clock draws its durations
/// to scale but its activations' starts from the real clock). A waypoint does not record when the last attempt of a retried
/// activation started (only failed attempts are listed), so without a trace
/// that attempt's bar includes the backoff wait before it; with the trace,
/// its [`TraceEvent::RetryScheduled`] (a task's
/// [`TraceEvent::TaskRetryScheduled`]) splits the two. A trace also brings
/// the fallback hops of a [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter)
/// called by a Paladin node (the engine's trace sinks receive them); without
/// one, the hops come from the records
/// ([`NodeExecutionRecord::hops`](crate::waypoint::NodeExecutionRecord::hops)),
/// an attempt's drawn once either way.
#[derive(Debug, Clone)]
pub struct Timeline<'a> {
    waypoints: &'a [Waypoint],
    trace: &'a [TraceEvent],
    title: Option<String>,
}

impl<'a> Timeline<'a> {
    /// The timeline of `waypoints`, all of one thread.
    pub fn new(waypoints: &'a [Waypoint]) -> Self {
        Timeline {
            waypoints,
            trace: &[],
            title: None,
        }
    }

    /// Adds what waypoints do not record, from the run's trace events (a
    /// [`CollectingTraceSink`](crate::trace::CollectingTraceSink)'s, in the order
    /// emitted): the exact backoff before a retried activation's last attempt,
    /// and fallback hops, each placed on the attempt that was running when it
    /// was reported (its node's, when the event names it). Events of other
    /// threads are ignored.
    pub fn with_trace(mut self, trace: &'a [TraceEvent]) -> Self {
        self.trace = trace;
        self
    }

    /// A heading for the page instead of `Run timeline — thread <id>`.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The page: `<!DOCTYPE html>`, a legend, the SVG, no script.
    pub fn to_html(&self) -> String {
        let model = Model::build(self.waypoints, self.trace);
        let thread = self
            .waypoints
            .first()
            .map(|w| w.thread_id.as_str())
            .unwrap_or("");
        let title = self
            .title
            .clone()
            .unwrap_or_else(|| format!("Run timeline — thread {thread}"));
        draw::page(&title, &model)
    }
}
