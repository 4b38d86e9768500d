//! One attempt between its trace events: `NodeStarted` and
//! `NodeFinished`, its stream tap, what it spent and skipped, and how it
//! ended on its `aegis.attempt` span.

use tracing::Level;

use super::activation::{ActivationCtx, AttemptEnd};
use super::deadline::AttemptStart;
use super::record::Recorder;
use crate::engine::kit::Kit;
use crate::engine::stream::tap::emitter;
use crate::graph::SpendMeter;
use crate::id::NodeId;
use crate::policy::Spend;
use crate::state::Battlefield;
use crate::trace::{AttemptStatus, TraceEvent};

impl Kit {
    /// One attempt under its bounds, between its trace events; a failure
    /// goes on the record.
    pub(super) async fn traced_attempt(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
        attempt: u32,
        rec: &mut Recorder<'_>,
    ) -> AttemptEnd {
        let task_key = || act.task.map(|t| t.task_key.clone());
        self.emit_with(Level::DEBUG, || TraceEvent::NodeStarted {
            thread_id: act.thread_id.to_string(),
            superstep: act.superstep,
            node_id: node_id.clone(),
            task_key: task_key(),
            attempt,
        });
        let (started_at, started) = rec.attempt_start();
        let tap = self.attempt_tap(act.thread_id, node_id, act.task, attempt);
        let emitter = emitter(tap.as_ref());
        let meter = if rec.metered() {
            SpendMeter::for_attempt(
                act.run_budget.spend().clone(),
                act.aegis.spend_cap,
                rec.spent(),
            )
        } else {
            SpendMeter::default()
        };
        let (end, ended) = self
            .bounded_attempt(
                act,
                state,
                node_id,
                attempt,
                AttemptStart {
                    at: started,
                    served: rec.served_for_attempt(),
                    emitter,
                    meter: meter.clone(),
                },
            )
            .await;
        rec.attempt_ended(ended);
        // The attempt's future is gone: an abandoned stream has charged
        // what it delivered.
        let spent = rec
            .metered()
            .then(|| self.metered(act, node_id, attempt, &meter, rec));
        let duration = ended.saturating_duration_since(started);
        let status = match &end {
            AttemptEnd::Done(_) => AttemptStatus::Succeeded,
            AttemptEnd::Error(e) => {
                rec.push(attempt, started_at, duration, e, spent);
                AttemptStatus::Failed(e.clone())
            }
            AttemptEnd::Shutdown => AttemptStatus::Skipped {
                reason: "shutdown".to_string(),
            },
        };
        if let Some(tap) = tap {
            // An attempt that ended without a directive is never merged.
            let done = matches!(end, AttemptEnd::Done(_));
            tap.close((!done).then(|| status.clone()));
            rec.keep_streamed(done.then_some(tap));
        }
        // A failed attempt is logged as a warning (see `log_event`).
        let level = match status {
            AttemptStatus::Failed(_) => Level::WARN,
            _ => Level::DEBUG,
        };
        self.emit_with(level, || TraceEvent::NodeFinished {
            thread_id: act.thread_id.to_string(),
            superstep: act.superstep,
            node_id: node_id.clone(),
            task_key: task_key(),
            attempt,
            status,
            cache_hit: false,
            cache_origin: None,
            duration,
        });
        end
    }
}

impl Kit {
    /// Puts what attempt `attempt` spent, and the hops it skipped, on the
    /// record and the trace, and the hops it made on the record (the relay
    /// traced them as they happened); returns its spend.
    fn metered(
        &self,
        act: &ActivationCtx<'_>,
        node_id: &NodeId,
        attempt: u32,
        meter: &SpendMeter,
        rec: &mut Recorder<'_>,
    ) -> Spend {
        let spent = meter.spent();
        rec.charge(attempt, spent, meter.expected(), meter.take_hops());
        for skip in meter.take_skips() {
            self.emit(TraceEvent::StepSkipped {
                thread_id: Some(act.thread_id.to_string()),
                superstep: Some(act.superstep),
                node_id: Some(node_id.clone()),
                task_key: act.task.map(|t| t.task_key.clone()),
                skip: skip.clone(),
            });
            rec.skipped(skip);
        }
        self.emit_with(Level::DEBUG, || TraceEvent::AttemptSpend {
            thread_id: act.thread_id.to_string(),
            superstep: act.superstep,
            node_id: node_id.clone(),
            task_key: act.task.map(|t| t.task_key.clone()),
            attempt,
            spend: spent,
        });
        spent
    }
}

/// Records how an attempt ended on its `aegis.attempt` span.
pub(super) fn attempt_span(span: &tracing::Span, end: &AttemptEnd, rec: &Recorder<'_>) {
    use crate::error::NodeErrorSource;
    match end {
        AttemptEnd::Done(_) => {
            span.record("outcome", "succeeded");
            if let Some(served) = rec.served_now() {
                if let Some(by) = &served.served_by {
                    span.record("served_by", by.as_str());
                }
                if let Some(position) = served.chain_position {
                    span.record("chain_position", position);
                }
                if let Some(model) = &served.model {
                    span.record("model", model.as_str());
                }
            }
        }
        AttemptEnd::Error(e) => {
            span.record("outcome", "failed");
            span.record("otel.status_code", "ERROR");
            span.record("transience", tracing::field::display(e.transience));
            span.record("error", tracing::field::display(&e.source));
            if let NodeErrorSource::Timeout(kind) = &e.source {
                span.record("timeout", tracing::field::display(kind));
            }
        }
        AttemptEnd::Shutdown => {
            span.record("outcome", "shutdown");
        }
    }
}
