//! The timeout rules: each attempt runs under the tightest of its run
//! timeout and the run deadline, its idle window, and cancellation plus the
//! shutdown grace. A result that arrives past a bound is no result.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

use super::activation::{ActivationCtx, AttemptEnd};
use crate::deadline::deadline_after;
use crate::engine::kit::Kit;
use crate::error::{NodeError, NodeErrorSource, TimeoutKind, Transience};
use crate::graph::{
    Directive, HeartbeatHandle, NodeContext, NodeEmitter, NodeSpec, ServedSlot, SpendMeter,
};
use crate::id::NodeId;
use crate::state::Battlefield;
use tokio_util::sync::CancellationToken;

impl ActivationCtx<'_> {
    /// When an attempt starting now is cut at the latest: the earliest of
    /// its run timeout, the run deadline and `enclosing`. A Battalion hands
    /// this to its child run as the child's enclosing deadline.
    pub(crate) fn attempt_deadline(&self, enclosing: Option<Instant>) -> Option<Instant> {
        let run_timeout = self
            .aegis
            .timeout
            .as_ref()
            .and_then(|t| t.run_timeout)
            .and_then(|d| deadline_after(Instant::now(), d));
        [run_timeout, self.run_budget.at(), enclosing]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(super) async fn sleep_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn idle_opt(heartbeat: &HeartbeatHandle, idle: Option<Duration>) {
    match idle {
        Some(i) => heartbeat.idle_for(i).await,
        None => std::future::pending().await,
    }
}

/// What an attempt starts with: when, and where it reports who served it
/// and what it streams.
pub(super) struct AttemptStart {
    pub(super) at: Instant,
    pub(super) served: ServedSlot,
    pub(super) emitter: NodeEmitter,
    pub(super) meter: SpendMeter,
}

/// An attempt's bounds: its hard deadline (the tighter of its run timeout
/// and the run deadline, which wins ties: when both pass together the run
/// is out of time) and its idle window on its heartbeat.
struct Bounds<'a> {
    node_id: &'a NodeId,
    attempt: u32,
    hard: Option<(Instant, TimeoutKind)>,
    idle: Option<Duration>,
    heartbeat: HeartbeatHandle,
}

impl Bounds<'_> {
    fn timed_out(&self, kind: TimeoutKind) -> AttemptEnd {
        AttemptEnd::Error(NodeError::new(
            self.node_id.clone(),
            self.attempt,
            Transience::Transient,
            NodeErrorSource::Timeout(kind),
        ))
    }

    /// How an attempt that returned `r` at `now` ended. A node that held
    /// its thread (a blocking call) kept the timers from firing, but its
    /// attempt still overran: it is cut after the fact, by the bound that
    /// passed first (the shutdown grace ending at `grace_end` among them).
    /// A result at exactly a deadline is in time.
    #[inline]
    fn settle(
        &self,
        r: Result<Directive, NodeError>,
        grace_end: Option<Instant>,
        now: Instant,
        cancellation: &CancellationToken,
    ) -> AttemptEnd {
        // An attempt without bounds (most of them) is never overdue.
        let unbounded = self.hard.is_none() && self.idle.is_none() && grace_end.is_none();
        let idle_end = self.idle.and_then(|i| self.heartbeat.idle_deadline(i));
        let overdue = if unbounded {
            None
        } else {
            [
                self.hard.map(|(d, k)| (d, Some(k))),
                idle_end.map(|d| (d, Some(TimeoutKind::Idle))),
                grace_end.map(|g| (g, None)),
            ]
            .into_iter()
            .flatten()
            .filter(|(d, _)| now > *d)
            .min_by_key(|(d, _)| *d)
        };
        match (overdue, r) {
            (Some((_, Some(kind))), _) => self.timed_out(kind),
            (Some((_, None)), _) => AttemptEnd::Shutdown,
            (None, Ok(d)) => AttemptEnd::Done(d),
            // A child run halted by the shared token: this attempt shuts
            // down too.
            (None, Err(e))
                if e.source == NodeErrorSource::Cancelled && cancellation.is_cancelled() =>
            {
                AttemptEnd::Shutdown
            }
            (None, Err(e)) => AttemptEnd::Error(e),
        }
    }
}

impl Kit {
    /// One attempt under its bounds. Dropping the attempt's future on
    /// expiry discards its partial work.
    pub(super) async fn bounded_attempt(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
        attempt: u32,
        start: AttemptStart,
    ) -> (AttemptEnd, Instant) {
        let timeout = act.aegis.timeout.as_ref();
        let idle = timeout.and_then(|t| t.idle_timeout);
        let run_timeout = timeout
            .and_then(|t| t.run_timeout)
            .and_then(|d| deadline_after(start.at, d))
            .map(|d| (d, TimeoutKind::Run));
        let bounds = Bounds {
            node_id,
            attempt,
            hard: match (run_timeout, act.run_budget.at()) {
                (Some((r, k)), Some(d)) if r < d => Some((r, k)),
                (_, Some(d)) => Some((d, TimeoutKind::EngineRun)),
                (r, None) => r,
            },
            idle,
            heartbeat: if idle.is_some() {
                HeartbeatHandle::tracking()
            } else {
                HeartbeatHandle::noop()
            }
            .with_first_chunk(timeout.and_then(|t| t.first_chunk)),
        };
        let ctx = self.attempt_context(act, &bounds, start);
        let fut = self.execute_caught(act, state, ctx);
        tokio::pin!(fut);
        // Most attempts finish on their first poll: they need no timers.
        // The bounds are still checked after the fact.
        if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
        {
            let now = Instant::now();
            return (bounds.settle(r, None, now, self.cancellation()), now);
        }
        // Boxed: only an attempt that waits (on I/O, a timer) gets here,
        // and inline its timers would enlarge every attempt's future.
        Box::pin(self.wait_bounded(act, &bounds, fut)).await
    }

    /// The attempt's context: who it is, what it may read, and where it
    /// reports its heartbeat, stream, spend and effects.
    #[inline]
    fn attempt_context(
        &self,
        act: &ActivationCtx<'_>,
        bounds: &Bounds<'_>,
        start: AttemptStart,
    ) -> NodeContext {
        NodeContext {
            node_id: bounds.node_id.clone(),
            thread_id: act.thread_id.clone(),
            superstep: act.superstep,
            attempt: bounds.attempt,
            heartbeat: bounds.heartbeat.clone(),
            shared: self.shared.clone(),
            parley_response: act.parley_response.cloned(),
            task: act.task_ref.clone(),
            served: start.served,
            emitter: start.emitter,
            meter: start.meter,
        }
    }

    /// An attempt that did not finish on its first poll, until it ends, a
    /// bound passes, or the run is cancelled (then [`Self::within_grace`]).
    async fn wait_bounded<F>(
        &self,
        act: &ActivationCtx<'_>,
        bounds: &Bounds<'_>,
        mut fut: std::pin::Pin<&mut F>,
    ) -> (AttemptEnd, Instant)
    where
        F: Future<Output = Result<Directive, NodeError>>,
    {
        let hard = bounds.hard;
        tokio::select! {
            biased;
            r = &mut fut => {
                let now = Instant::now();
                return (bounds.settle(r, None, now, self.cancellation()), now);
            }
            _ = sleep_opt(hard.map(|h| h.0)) => {
                let kind = hard.map_or(TimeoutKind::Run, |h| h.1);
                return (bounds.timed_out(kind), Instant::now());
            }
            _ = idle_opt(&bounds.heartbeat, bounds.idle) => {
                return (bounds.timed_out(TimeoutKind::Idle), Instant::now());
            }
            _ = self.cancellation().cancelled() => {}
        }
        let end = self.within_grace(act, bounds, fut).await;
        (end, Instant::now())
    }

    /// A cancelled attempt: it may finish within the shutdown grace, still
    /// under its own bounds (a stall past the idle window is no success).
    /// A Battalion is not cut at the grace: its child already gives its
    /// own attempts no more than this grace, then writes its Halted
    /// waypoint; cutting it here would drop the child mid-write.
    async fn within_grace<F>(
        &self,
        act: &ActivationCtx<'_>,
        bounds: &Bounds<'_>,
        mut fut: std::pin::Pin<&mut F>,
    ) -> AttemptEnd
    where
        F: Future<Output = Result<Directive, NodeError>>,
    {
        let grace_end = match act.spec {
            NodeSpec::Battalion { .. } => None,
            // A grace too long for an `Instant` leaves the attempt to its
            // own bounds.
            _ => deadline_after(Instant::now(), act.shutdown_grace),
        };
        let (until, kind) = match (bounds.hard, grace_end) {
            (Some((d, k)), Some(g)) if d < g => (Some(d), Some(k)),
            (_, Some(g)) => (Some(g), None),
            (Some((d, k)), None) => (Some(d), Some(k)),
            (None, None) => (None, None),
        };
        tokio::select! {
            biased;
            r = &mut fut => bounds.settle(r, grace_end, Instant::now(), self.cancellation()),
            _ = sleep_opt(until) => match kind {
                Some(k) => bounds.timed_out(k),
                None => AttemptEnd::Shutdown,
            },
            _ = idle_opt(&bounds.heartbeat, bounds.idle) => bounds.timed_out(TimeoutKind::Idle),
        }
    }
}
