//! The activation's record: when it started, each failed attempt, what
//! the attempts spent and skipped, how it ended.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use super::activation::ActivationResult;
use crate::engine::run_budget::RunBudget;
use crate::engine::stream::tap::AttemptTap;
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::graph::{MusterTask, ServedSlot};
use crate::id::NodeId;
use crate::policy::hop::HopNote;
use crate::policy::{CacheScope, Skip, Spend};
use crate::trace::{AttemptStatus, CacheOrigin};
use crate::waypoint::{AttemptRecord, NodeExecutionRecord, NodeStatus, RetrySkip};

/// Builds the [`NodeExecutionRecord`] of one activation as it runs.
pub(super) struct Recorder<'n> {
    /// Borrowed from the activation: the record takes its own copy.
    node_id: &'n NodeId,
    task_key: Option<String>,
    started_at: SystemTime,
    started: Instant,
    failed: Vec<AttemptRecord>,
    retry_skipped: Option<RetrySkip>,
    /// Who served the latest attempt's answer (a Paladin node).
    served: ServedSlot,
    /// The stream tap of the attempt that succeeded, for an `after`
    /// interceptor that discards its result.
    streamed: Option<Arc<AttemptTap>>,
    /// Nothing ran since the recorder started: attempt 1 starts at the
    /// activation's own instants (two clock reads fewer per activation).
    untouched: bool,
    /// When the last attempt ended, for a record finished right after it.
    ended: Option<Instant>,
    /// What the attempts spent and skipped, when they are metered (a
    /// Paladin node's: no other kind calls a model through the engine).
    /// Out of line, so an activation of any other node carries a pointer.
    metering: Option<Box<Metering>>,
}

/// What a metered activation's attempts spent and skipped so far.
#[derive(Default)]
struct Metering {
    /// What the attempts spent so far.
    spend: Option<Spend>,
    /// What a retry is expected to spend: what the latest attempt spent,
    /// or, when it spent nothing, what its first request was expected to.
    last_spend: Spend,
    /// Retries and hops not sent.
    skips: Vec<Skip>,
    /// The fallback hops inside the attempts.
    hops: Vec<HopNote>,
}

impl<'n> Recorder<'n> {
    pub(super) fn new(node_id: &'n NodeId, task: Option<&MusterTask>) -> Self {
        Self::starting_at(node_id, task, SystemTime::now(), Instant::now())
    }

    /// A recorder for an activation of the call `run`: its wall time is
    /// derived from the monotonic one ([`RunBudget::wall_at`]), one clock
    /// read instead of two. A Paladin node's (`paladin`) also keeps who
    /// served each attempt's answer and meters what the attempts spend: no
    /// other kind reports either, so no other pays for them.
    #[inline]
    pub(super) fn of_run(
        node_id: &'n NodeId,
        task: Option<&MusterTask>,
        run: &RunBudget,
        paladin: bool,
    ) -> Self {
        let started = Instant::now();
        let mut rec = Self::starting_at(node_id, task, run.wall_at(started), started);
        if paladin {
            rec.served = ServedSlot::recording();
            rec.metering = Some(Box::default());
        }
        rec
    }

    #[inline]
    fn starting_at(
        node_id: &'n NodeId,
        task: Option<&MusterTask>,
        started_at: SystemTime,
        started: Instant,
    ) -> Self {
        Recorder {
            node_id,
            task_key: task.map(|t| t.task_key.clone()),
            started_at,
            started,
            failed: Vec::new(),
            retry_skipped: None,
            served: ServedSlot::default(),
            streamed: None,
            untouched: true,
            ended: None,
            metering: None,
        }
    }

    /// Something that takes time ran (a cache lookup, an interceptor): the
    /// next attempt reads its own start from the clock.
    pub(super) fn touch(&mut self) {
        self.untouched = false;
        self.ended = None;
    }

    /// When an attempt starting now starts, by both clocks. The wall time
    /// is the activation's plus the monotonic time since, so only one
    /// clock is read.
    pub(super) fn attempt_start(&mut self) -> (SystemTime, Instant) {
        if std::mem::take(&mut self.untouched) {
            return (self.started_at, self.started);
        }
        let now = Instant::now();
        let wall = self
            .started_at
            .checked_add(now.saturating_duration_since(self.started))
            .unwrap_or_else(SystemTime::now);
        (wall, now)
    }

    /// Whether the attempts are metered (a Paladin node's).
    pub(super) fn metered(&self) -> bool {
        self.metering.is_some()
    }

    /// What the activation's attempts spent so far.
    pub(super) fn spent(&self) -> Spend {
        self.metering
            .as_ref()
            .and_then(|m| m.spend)
            .unwrap_or_default()
    }

    /// What a retry is expected to spend: what the latest attempt spent,
    /// or, when it spent nothing, what its first request was expected to.
    pub(super) fn expected_spend(&self) -> Spend {
        self.metering
            .as_ref()
            .map(|m| m.last_spend)
            .unwrap_or_default()
    }

    /// A retry or hop not sent, for the record.
    pub(super) fn skipped(&mut self, skip: Skip) {
        self.metering.get_or_insert_default().skips.push(skip);
    }

    /// Who produced the successful activation `record` ends, for the
    /// cache entry it is stored as under a key of `scope`.
    pub(super) fn origin(
        &self,
        thread_id: &str,
        record: &NodeExecutionRecord,
        scope: CacheScope,
    ) -> CacheOrigin {
        let served = self.served.take().unwrap_or_default();
        CacheOrigin {
            node_id: self.node_id.clone(),
            task_key: record.task_key.clone(),
            thread_id: Some(thread_id.to_string()),
            attempt: record.attempt,
            served_by: served.served_by,
            model: served.model,
            chain_position: served.chain_position,
            fallback: served.fallback,
            scope,
        }
    }

    /// The succeeding attempt's result was discarded after all: its
    /// streamed tokens are abandoned too.
    pub(super) fn discard_streamed(&mut self, reason: impl FnOnce() -> AttemptStatus) {
        if let Some(tap) = self.streamed.take() {
            tap.close(Some(reason()));
        }
    }

    /// When the activation began.
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// Time since the activation began.
    pub(super) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The record so far, ending in `status` at `attempt`: the activation's
    /// last word (the task key moves into it).
    #[inline]
    pub(super) fn finish(&mut self, status: NodeStatus, attempt: u32) -> NodeExecutionRecord {
        let duration_ms = millis(
            self.ended
                .take()
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(self.started),
        );
        let mut record = NodeExecutionRecord::of_activation(
            self.node_id.clone(),
            self.task_key.take(),
            status,
            attempt,
            std::mem::take(&mut self.failed),
            self.started_at,
            duration_ms,
            self.retry_skipped.take(),
        );
        // The effects are attached by the activation when the node made any.
        if let Some(m) = self.metering.as_deref_mut() {
            record.set_metered(
                m.spend,
                std::mem::take(&mut m.skips),
                std::mem::take(&mut m.hops),
            );
        }
        record
    }

    /// Where the attempt starting now reports who served its answer (a
    /// failed attempt's report never describes a later success, so an
    /// earlier one is dropped).
    pub(super) fn served_for_attempt(&self) -> ServedSlot {
        self.served.take();
        self.served.clone()
    }

    /// Who served the latest attempt's answer, left in place.
    pub(super) fn served_now(&self) -> Option<crate::graph::Served> {
        self.served.peek()
    }

    /// The latest attempt ended at `at`.
    pub(super) fn attempt_ended(&mut self, at: Instant) {
        self.ended = Some(at);
    }

    /// The stream tap of the attempt that succeeded (see `discard_streamed`).
    pub(super) fn keep_streamed(&mut self, tap: Option<Arc<AttemptTap>>) {
        self.streamed = tap;
    }

    /// Puts what attempt `attempt` spent (`spent`; `expected`, what its first
    /// request was expected to, when it spent nothing) and the fallback
    /// hops it made on the record.
    pub(super) fn charge(
        &mut self,
        attempt: u32,
        spent: Spend,
        expected: Option<Spend>,
        hops: Vec<HopNote>,
    ) {
        let metering = self.metering.get_or_insert_default();
        metering.last_spend = if spent.is_zero() {
            expected.unwrap_or_default()
        } else {
            spent
        };
        metering.spend = Some(metering.spend.unwrap_or_default().plus(&spent));
        metering.hops.extend(hops.into_iter().map(|mut hop| {
            hop.attempt = attempt;
            hop
        }));
    }

    /// A retry not scheduled for want of time, for the record.
    pub(super) fn retry_skipped(&mut self, skip: RetrySkip) {
        self.retry_skipped = Some(skip);
    }

    /// Cancelled before or during `attempt`.
    pub(super) fn shutdown(&mut self, attempt: u32) -> ActivationResult {
        ActivationResult::Shutdown {
            record: self.finish(
                NodeStatus::Skipped {
                    reason: "shutdown".to_string(),
                },
                attempt,
            ),
        }
    }

    /// A permanent failure at `attempt` (an interceptor refused it).
    pub(super) fn failed(&mut self, error: NodeError, attempt: u32) -> ActivationResult {
        ActivationResult::Failed {
            error: Box::new(error),
            record: self.finish(NodeStatus::Failed, attempt),
            budget_exhausted: false,
        }
    }

    pub(super) fn push(
        &mut self,
        attempt: u32,
        started_at: SystemTime,
        took: Duration,
        error: &NodeError,
        spend: Option<Spend>,
    ) {
        self.failed.push(AttemptRecord {
            attempt,
            started_at,
            duration_ms: millis(took),
            error: error.clone(),
            spend,
        });
    }
}

impl ActivationResult {
    /// A vanguard entry naming a node the graph does not declare: only a
    /// store returning another graph's vanguard gets here. The activation
    /// fails, not the process.
    pub(crate) fn undeclared(node_id: &NodeId) -> Self {
        let error = NodeError::new(
            node_id.clone(),
            1,
            Transience::Permanent,
            NodeErrorSource::Function {
                message: "the waypoint names a node this graph does not declare".to_string(),
            },
        );
        Recorder::new(node_id, None).failed(error, 1)
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
