//! [`RunStream`]: a run on a task of its own, read as a [`Stream`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use super::events::StreamEvent;
use super::tap::StreamTap;
use crate::engine::outcome::RunOutcome;
use crate::error::EngineError;

/// A run in progress, as a [`Stream`] of [`StreamEvent`]s ending with
/// [`StreamEvent::Finished`].
///
/// The run executes on a tokio task of its own, so a slow consumer slows
/// nothing but its stream (see [`StreamOptions::with_capacity`](crate::engine::StreamOptions::with_capacity)). Dropping
/// the stream before the end shuts the run down as the engine's
/// cancellation token would: running attempts get their shutdown grace and
/// the thread halts with a resumable `Halted` waypoint.
pub struct RunStream {
    thread_id: String,
    tap: Arc<StreamTap>,
    run: Option<JoinHandle<Result<RunOutcome, EngineError>>>,
    outcome: Option<Result<RunOutcome, EngineError>>,
    /// Cancels the run's token when the stream is dropped.
    _halt_on_drop: DropGuard,
    finished: bool,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("options", &self.tap.options)
            .field("running", &self.run.is_some())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl RunStream {
    pub(super) fn new(
        thread_id: &str,
        tap: Arc<StreamTap>,
        run: JoinHandle<Result<RunOutcome, EngineError>>,
        halt: DropGuard,
    ) -> Self {
        RunStream {
            thread_id: thread_id.to_string(),
            tap,
            run: Some(run),
            outcome: None,
            _halt_on_drop: halt,
            finished: false,
        }
    }

    /// Waits for the run's end without reading its events (they are
    /// dropped, and the queue stays bounded): what `start` or `resume` would
    /// have returned. After the stream has yielded its
    /// [`StreamEvent::Finished`] the outcome is gone, and this returns
    /// [`EngineError::Halted`], as it does when the runtime shut down under
    /// the run.
    pub async fn outcome(mut self) -> Result<RunOutcome, EngineError> {
        if let Some(outcome) = self.outcome.take() {
            return outcome;
        }
        if let Some(run) = self.run.take() {
            match run.await {
                Ok(outcome) => return outcome,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        Err(EngineError::Halted {
            thread_id: std::mem::take(&mut self.thread_id),
            vanguard: Vec::new(),
        })
    }
}

impl Stream for RunStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(run) = &mut this.run
            && let Poll::Ready(joined) = Pin::new(run).poll(cx)
        {
            this.run = None;
            match joined {
                Ok(outcome) => this.outcome = Some(outcome),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime is shutting down: no outcome will come.
                Err(_) => {}
            }
        }
        let mut q = this.tap.lock();
        if let Some(event) = q.events.pop_front() {
            return Poll::Ready(Some(event));
        }
        if this.run.is_some() {
            q.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if q.dropped > 0 {
            let dropped = std::mem::take(&mut q.dropped);
            return Poll::Ready(Some(StreamEvent::Lagged { dropped }));
        }
        drop(q);
        this.finished = true;
        Poll::Ready(this.outcome.take().map(StreamEvent::Finished))
    }
}
