//! The sink of the attempt a call runs in: what a fallback chain reports
//! (its hops) reaches the engine's `Events` stream and trace sinks without
//! the chain knowing the engine. The engine scopes one around each Paladin
//! attempt, and only when something listens (a stream or a trace sink), so
//! an unobserved run pays nothing.

use std::future::Future;
use std::sync::Arc;

use super::{TraceEvent, TraceSink};

/// Where events of the running attempt go.
pub(crate) trait AttemptSink: Send + Sync + 'static {
    /// Receives one event of the attempt (its node filled in by the sink).
    fn emit(&self, event: TraceEvent);

    /// Whether `sink` already receives what this sink is given: a chain
    /// then skips it, so a sink added to both the chain and the engine
    /// sees each hop once.
    fn covers(&self, sink: &Arc<dyn TraceSink>) -> bool;
}

tokio::task_local! {
    static ATTEMPT: Arc<dyn AttemptSink>;
}

/// Runs `fut` with `sink` as the attempt's sink, or as it is without one.
pub(crate) async fn within<F: Future>(sink: Option<Arc<dyn AttemptSink>>, fut: F) -> F::Output {
    match sink {
        Some(sink) => ATTEMPT.scope(sink, fut).await,
        None => fut.await,
    }
}

/// The running attempt's sink, if the engine scoped one.
pub(crate) fn current() -> Option<Arc<dyn AttemptSink>> {
    ATTEMPT.try_with(Arc::clone).ok()
}
