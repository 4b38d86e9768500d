//! The timeout rules: each attempt runs under the tightest of its run
//! timeout and the run deadline, its idle window, and cancellation plus the
//! shutdown grace. A result that arrives past a bound is no result.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

use super::activation::{ActivationCtx, AttemptEnd};
use crate::deadline::deadline_after;
use crate::engine::WarEngine;
use crate::error::{NodeError, NodeErrorSource, TimeoutKind, Transience};
use crate::graph::{
    Directive, HeartbeatHandle, NodeContext, NodeEmitter, NodeSpec, ServedSlot, SpendMeter,
};
use crate::id::NodeId;
use crate::state::Battlefield;
use crate::waypoint::WaypointStore;

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

impl<S: WaypointStore> WarEngine<S> {
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
        let AttemptStart {
            at: started,
            served,
            emitter,
            meter,
        } = start;
        let timeout = act.aegis.timeout.as_ref();
        let idle = timeout.and_then(|t| t.idle_timeout);
        let heartbeat = if idle.is_some() {
            HeartbeatHandle::tracking()
        } else {
            HeartbeatHandle::noop()
        }
        .with_first_chunk(timeout.and_then(|t| t.first_chunk));
        let ctx = NodeContext {
            node_id: node_id.clone(),
            thread_id: act.thread_id.clone(),
            superstep: act.superstep,
            attempt,
            heartbeat: heartbeat.clone(),
            cancellation: self.cancellation.clone(),
            parley_response: act.parley_response.cloned(),
            task: act.task_ref.clone(),
            served,
            emitter,
            meter,
            effects: self.effects.clone(),
        };
        let run_timeout = timeout
            .and_then(|t| t.run_timeout)
            .and_then(|d| deadline_after(started, d))
            .map(|d| (d, TimeoutKind::Run));
        // The run deadline wins ties: when both pass together the run is
        // out of time.
        let hard = match (run_timeout, act.run_budget.at()) {
            (Some((r, k)), Some(d)) if r < d => Some((r, k)),
            (_, Some(d)) => Some((d, TimeoutKind::EngineRun)),
            (r, None) => r,
        };
        let timed_out = |kind| {
            AttemptEnd::Error(NodeError::new(
                node_id.clone(),
                attempt,
                Transience::Transient,
                NodeErrorSource::Timeout(kind),
            ))
        };
        let finish = |r: Result<Directive, NodeError>| match r {
            Ok(d) => AttemptEnd::Done(d),
            // A child run halted by the shared token: this attempt shuts down too.
            Err(e)
                if e.source == NodeErrorSource::Cancelled && self.cancellation.is_cancelled() =>
            {
                AttemptEnd::Shutdown
            }
            Err(e) => AttemptEnd::Error(e),
        };

        // A node that held its thread (a blocking call) kept the timers from
        // firing, but its attempt still overran: it is cut after the fact, by
        // the bound that passed first. A result at exactly a deadline is in
        // time.
        let overdue = |grace_end: Option<Instant>, now: Instant| {
            let idle_end = idle.and_then(|i| heartbeat.idle_deadline(i));
            [
                hard.map(|(d, k)| (d, Some(k))),
                idle_end.map(|d| (d, Some(TimeoutKind::Idle))),
                grace_end.map(|g| (g, None)),
            ]
            .into_iter()
            .flatten()
            .filter(|(d, _)| now > *d)
            .min_by_key(|(d, _)| *d)
            .map(|(_, kind)| match kind {
                Some(k) => timed_out(k),
                None => AttemptEnd::Shutdown,
            })
        };

        let fut = self.execute_caught(act, state, ctx);
        tokio::pin!(fut);
        // Most attempts finish on their first poll: they need no timers.
        // The bounds are still checked after the fact, as below.
        if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
        {
            let now = Instant::now();
            return (overdue(None, now).unwrap_or_else(|| finish(r)), now);
        }
        tokio::select! {
            biased;
            r = &mut fut => {
                let now = Instant::now();
                return (overdue(None, now).unwrap_or_else(|| finish(r)), now);
            }
            _ = sleep_opt(hard.map(|h| h.0)) => {
                return (timed_out(hard.map_or(TimeoutKind::Run, |h| h.1)), Instant::now());
            }
            _ = idle_opt(&heartbeat, idle) => return (timed_out(TimeoutKind::Idle), Instant::now()),
            _ = self.cancellation.cancelled() => {}
        }

        // Cancelled: the attempt may finish within the shutdown grace, still
        // under its own bounds (a stall past the idle window is no success).
        // A Battalion is not cut at the grace: its child already gives its
        // own attempts no more than this grace, then writes its Halted
        // waypoint; cutting it here would drop the child mid-write.
        let grace_end = match act.spec {
            NodeSpec::Battalion { .. } => None,
            // A grace too long for an `Instant` leaves the attempt to its
            // own bounds.
            _ => deadline_after(Instant::now(), act.shutdown_grace),
        };
        let (until, kind) = match (hard, grace_end) {
            (Some((d, k)), Some(g)) if d < g => (Some(d), Some(k)),
            (_, Some(g)) => (Some(g), None),
            (Some((d, k)), None) => (Some(d), Some(k)),
            (None, None) => (None, None),
        };
        let end = tokio::select! {
            biased;
            r = &mut fut => overdue(grace_end, Instant::now()).unwrap_or_else(|| finish(r)),
            _ = sleep_opt(until) => match kind {
                Some(k) => timed_out(k),
                None => AttemptEnd::Shutdown,
            },
            _ = idle_opt(&heartbeat, idle) => timed_out(TimeoutKind::Idle),
        };
        (end, Instant::now())
    }
}
