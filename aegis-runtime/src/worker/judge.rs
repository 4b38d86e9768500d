//! Judging threads another version of a graph left: whether this worker's
//! graph can continue each (the check `resume` runs), recorded as a
//! [`Verdict`] so that claims follow it (see [`RunQueue::unjudged`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::call::within;
use super::{RunQueue, Verdict, WorkerInfo};
use crate::error::StoreError;
use crate::graph::WarGraph;

/// How many threads a worker judges per pass: each costs a read of the
/// thread's latest waypoint.
pub(super) const JUDGE_BATCH: usize = 32;

/// After a judging pass that found less than a batch, how many poll
/// intervals pass before the next one.
pub(super) const JUDGE_PAUSE_POLLS: u32 = 10;

/// What a judging pass did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Judged {
    /// Threads handed out to judge.
    pub(super) seen: usize,
    /// Verdicts recorded compatible.
    pub(super) compatible: usize,
}

/// Judges up to [`JUDGE_BATCH`] threads pinned to other versions of
/// this worker's graphs, as `resume` would (the same check, on the
/// thread's latest waypoint), and records each verdict; returns how
/// many it saw and how many it recorded compatible. A thread whose
/// waypoints cannot be read is left unjudged, to be tried again on a
/// later pass.
pub(super) async fn judge(
    queue: &Arc<dyn RunQueue>,
    graphs: &HashMap<String, Arc<WarGraph>>,
    info: &WorkerInfo,
    limit: Duration,
) -> Judged {
    let listed = within(
        limit,
        "a list of threads to judge",
        queue.unjudged(info, JUDGE_BATCH),
    );
    let runs = match listed.await {
        Ok(runs) => runs,
        Err(e) => {
            tracing::warn!(error = %e, "aegis worker: listing threads to judge failed");
            return Judged::default();
        }
    };
    let store = queue.waypoints();
    let seen = runs.len();
    let mut compatible = 0;
    for run in runs {
        let (Some(graph), Some(key)) = (
            graphs.get(&run.graph_name),
            info.graphs.iter().find(|g| g.name == run.graph_name),
        ) else {
            continue;
        };
        let read = tokio::time::timeout(limit, store.latest(&run.thread_id))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Backend(format!(
                    "no answer reading the thread within {limit:?}"
                )))
            });
        let verdict = match read {
            // Claimed once but never written: it starts from its input
            // on any graph of its name.
            Ok(None) => Verdict::compatible(&run, key, None),
            Ok(Some(latest)) => match crate::engine::evolve::onto(graph, latest) {
                Ok(moved) => Verdict::compatible(
                    &run,
                    key,
                    moved.previous_graph.and_then(|p| p.migration.clone()),
                ),
                Err(e) => Verdict::incompatible(&run, key, e.to_string()),
            },
            Err(e) => {
                tracing::warn!(error = %e, thread_id = %run.thread_id, "aegis worker: reading a thread to judge failed");
                continue;
            }
        };
        tracing::info!(
            worker = %info.worker_id,
            thread_id = %run.thread_id,
            pinned_to = %run.fingerprint,
            fingerprint = %key.fingerprint,
            compatible = verdict.compatible,
            "aegis worker: judged a thread of another version"
        );
        match within(limit, "a verdict", queue.record_verdict(&verdict)).await {
            Ok(()) => compatible += usize::from(verdict.compatible),
            Err(e) => {
                tracing::warn!(error = %e, thread_id = %run.thread_id, "aegis worker: recording a verdict failed")
            }
        }
    }
    Judged { seen, compatible }
}
