//! The model: lanes of marks on one time axis, in milliseconds since the run
//! began, built from the waypoints and what the trace adds.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::facts::TraceFacts;
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::id::NodeId;
use crate::policy::Spend;
use crate::trace::TraceEvent;
use crate::waypoint::{HandledFailure, NodeExecutionRecord, NodeStatus, Waypoint, WaypointStatus};

/// How an attempt ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Succeeded,
    Transient,
    Permanent,
    Unknown,
    Timeout,
    Skipped,
}

impl Outcome {
    pub(super) fn of(error: &NodeError) -> Self {
        if matches!(error.source, NodeErrorSource::Timeout(_)) {
            return Outcome::Timeout;
        }
        match error.transience {
            Transience::Transient => Outcome::Transient,
            Transience::Permanent => Outcome::Permanent,
            Transience::Unknown => Outcome::Unknown,
        }
    }

    /// The CSS class, also what a test reads.
    pub(super) fn class(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed-transient",
            Outcome::Permanent => "failed-permanent",
            Outcome::Unknown => "failed-unknown",
            Outcome::Timeout => "timeout",
            Outcome::Skipped => "skipped",
        }
    }

    pub(super) fn words(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed (transient)",
            Outcome::Permanent => "failed (permanent)",
            Outcome::Unknown => "failed (unknown)",
            Outcome::Timeout => "timed out",
            Outcome::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Mark {
    Attempt {
        attempt: u32,
        outcome: Outcome,
        /// The error, the skip reason, or a note.
        detail: Option<String>,
        /// Fallback hops reported during this attempt: (from, to).
        hops: Vec<(String, String)>,
        /// The bar includes an unknown backoff before the attempt.
        includes_wait: bool,
    },
    Backoff {
        before_attempt: u32,
    },
    CacheHit,
    Handled {
        handler: String,
    },
    Parley {
        prompt: String,
        answered: bool,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) mark: Mark,
}

#[derive(Debug)]
pub(super) struct Lane {
    pub(super) node: NodeId,
    pub(super) task: Option<String>,
    pub(super) marks: Vec<Placed>,
}

impl Lane {
    pub(super) fn name(&self) -> String {
        match &self.task {
            Some(t) => format!("{}[{t}]", self.node),
            None => self.node.to_string(),
        }
    }
}

/// A line across every lane.
#[derive(Debug)]
pub(super) struct Rule {
    pub(super) at: f64,
    pub(super) kind: RuleKind,
    pub(super) text: String,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum RuleKind {
    Superstep,
    Halted,
    Failed,
}

#[derive(Debug)]
pub(super) struct Model {
    pub(super) lanes: Vec<Lane>,
    pub(super) rules: Vec<Rule>,
    pub(super) end: f64,
    pub(super) status: String,
    pub(super) supersteps: u32,
    pub(super) attempts: usize,
    /// What the thread's model calls spent, when any was metered.
    pub(super) spend: Option<Spend>,
}

pub(super) fn since(t0: SystemTime, t: SystemTime) -> f64 {
    t.duration_since(t0).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0
}

/// `detail` followed by what became of each effect of `r`'s attempt
/// `attempt` (`effect charge aegis-…: done`), one per line.
pub(super) fn effects_of(
    r: &NodeExecutionRecord,
    attempt: u32,
    detail: Option<String>,
) -> Option<String> {
    let lines: Vec<String> = r
        .effects
        .iter()
        .filter(|e| e.attempt == attempt)
        .map(|e| format!("effect {} {}: {}", e.name, e.key, e.outcome.name()))
        .collect();
    if lines.is_empty() {
        return detail;
    }
    Some(
        detail
            .into_iter()
            .chain(lines)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

impl Model {
    pub(super) fn build(waypoints: &[Waypoint], trace: &[TraceEvent]) -> Self {
        let thread = waypoints
            .first()
            .map(|w| w.thread_id.as_str())
            .unwrap_or("");
        let facts = TraceFacts::read(thread, trace);

        // Every record once (an interrupted superstep's finished part is
        // listed again when it closes), with the superstep it ran in.
        let mut seen = std::collections::HashSet::new();
        let mut records: Vec<(u32, &NodeExecutionRecord)> = Vec::new();
        for w in waypoints {
            let listed = w.records.iter().chain(w.completed().map(|c| &c.record));
            for r in listed {
                if seen.insert((r.node_id.clone(), r.task_key.clone(), r.started_at)) {
                    records.push((w.superstep, r));
                }
            }
        }
        let t0 = records
            .iter()
            .map(|(_, r)| r.started_at)
            .chain(waypoints.first().map(|w| w.created_at))
            .min()
            .unwrap_or(SystemTime::UNIX_EPOCH);

        let mut lanes: Vec<Lane> = Vec::new();

        let mut attempts = 0;
        let mut end: f64 = 0.0;
        let spend = records
            .iter()
            .filter_map(|(_, r)| r.spend)
            .reduce(|a, b| a.plus(&b));
        for (superstep, r) in &records {
            let lane = lane_of(&r.node_id, &r.task_key, &mut lanes);
            let start = since(t0, r.started_at);
            let finish = start + r.duration_ms as f64;
            let marks = &mut lanes[lane].marks;
            if r.cache_hit {
                marks.push(Placed {
                    start,
                    end: finish,
                    mark: Mark::CacheHit,
                });
                end = end.max(finish);
                continue;
            }
            // The traced hops when the trace has the attempt's, else the
            // record's (a timeline drawn from waypoints alone): never both,
            // so a hop is drawn once.
            let hops_of = |attempt: u32| {
                facts
                    .hops
                    .get(&(r.node_id.clone(), r.task_key.clone(), attempt, *superstep))
                    .cloned()
                    .unwrap_or_else(|| {
                        r.hops
                            .iter()
                            .filter(|h| h.attempt == attempt)
                            .map(|h| (h.from_provider.clone(), h.to_provider.clone()))
                            .collect()
                    })
            };
            let delay_before = |attempt: u32| {
                let task = (r.node_id.clone(), r.task_key.clone(), attempt, *superstep);
                let node = (r.node_id.clone(), None, attempt, *superstep);
                facts
                    .delays
                    .get(&task)
                    .or_else(|| facts.delays.get(&node))
                    .copied()
                    .flatten()
                    .map(|d| d.as_secs_f64() * 1000.0)
            };
            let mut cursor = start;
            for (i, a) in r.attempts.iter().enumerate() {
                // The traced wait when there is one (exact on any clock),
                // else the wall-clock gap.
                let a_start = match delay_before(a.attempt) {
                    Some(d) if i > 0 => cursor + d,
                    _ => since(t0, a.started_at).max(cursor),
                };
                if i > 0 && a_start > cursor {
                    marks.push(Placed {
                        start: cursor,
                        end: a_start,
                        mark: Mark::Backoff {
                            before_attempt: a.attempt,
                        },
                    });
                }
                let a_end = a_start + a.duration_ms as f64;
                let detail = match &a.spend {
                    Some(spend) => format!("{}; spent {spend}", a.error.source),
                    None => a.error.source.to_string(),
                };
                marks.push(Placed {
                    start: a_start,
                    end: a_end,
                    mark: Mark::Attempt {
                        attempt: a.attempt,
                        outcome: Outcome::of(&a.error),
                        detail: effects_of(r, a.attempt, Some(detail)),
                        hops: hops_of(a.attempt),
                        includes_wait: false,
                    },
                });
                attempts += 1;
                cursor = a_end;
            }
            let last_listed = r.attempts.last().map(|a| a.attempt);
            let closing = match &r.status {
                NodeStatus::Succeeded => Some((Outcome::Succeeded, None)),
                NodeStatus::Skipped { reason } => Some((Outcome::Skipped, Some(reason.clone()))),
                // A final failure is the last listed attempt.
                NodeStatus::Failed if last_listed == Some(r.attempt) => None,
                NodeStatus::Failed => Some((Outcome::Unknown, None)),
            };
            // What the closing attempt spent and what the activation
            // skipped go on its bar (a final failure's skips on the last
            // failed one's, listed above, would be lost: they go here only
            // when a closing bar is drawn).
            let closing = closing.map(|(outcome, detail)| {
                let mut notes: Vec<String> = detail.into_iter().collect();
                if let Some(total) = r.spend {
                    let before = r
                        .attempts
                        .iter()
                        .filter_map(|a| a.spend)
                        .fold(Spend::default(), |s, a| s.plus(&a));
                    let own = Spend::new(
                        total.prompt_tokens.saturating_sub(before.prompt_tokens),
                        total
                            .completion_tokens
                            .saturating_sub(before.completion_tokens),
                        total.cost.saturating_sub(before.cost),
                    )
                    .with_estimated(total.estimated);
                    notes.push(format!("spent {own}"));
                }
                notes.extend(r.skips.iter().map(ToString::to_string));
                (outcome, (!notes.is_empty()).then(|| notes.join("; ")))
            });
            if closing.is_none()
                && !r.skips.is_empty()
                && let Some(Placed {
                    mark: Mark::Attempt { detail, .. },
                    ..
                }) = marks.last_mut()
            {
                let skips: Vec<String> = r.skips.iter().map(ToString::to_string).collect();
                let text = detail.get_or_insert_with(String::new);
                text.push_str("; ");
                text.push_str(&skips.join("; "));
            }
            if let Some((outcome, detail)) = closing {
                let finish = finish.max(cursor);
                let retried = !r.attempts.is_empty();
                let (a_start, includes_wait) = match delay_before(r.attempt) {
                    Some(d) if retried => ((cursor + d).min(finish), false),
                    _ => (cursor, retried),
                };
                if retried && a_start > cursor {
                    marks.push(Placed {
                        start: cursor,
                        end: a_start,
                        mark: Mark::Backoff {
                            before_attempt: r.attempt,
                        },
                    });
                }
                marks.push(Placed {
                    start: a_start,
                    end: finish,
                    mark: Mark::Attempt {
                        attempt: r.attempt,
                        outcome,
                        detail: effects_of(r, r.attempt, detail),
                        hops: hops_of(r.attempt),
                        includes_wait,
                    },
                });
                attempts += 1;
                cursor = finish;
            }
            end = end.max(cursor);
        }

        // A muster's lanes in task order, right after its node's first lane.
        let mut task_index: HashMap<(NodeId, String), u32> = HashMap::new();
        for w in waypoints {
            for a in w.vanguard.iter() {
                if let Some(task) = &a.task {
                    task_index.insert((a.node_id.clone(), task.task_key.clone()), task.index);
                }
            }
        }
        let first_of: HashMap<NodeId, usize> = lanes
            .iter()
            .enumerate()
            .rev()
            .map(|(i, l)| (l.node.clone(), i))
            .collect();
        lanes.sort_by_key(|l| {
            let index = l.task.as_ref().map(|t| {
                task_index
                    .get(&(l.node.clone(), t.clone()))
                    .copied()
                    .unwrap_or(u32::MAX)
            });
            (first_of.get(&l.node).copied().unwrap_or(usize::MAX), index)
        });

        // Handled failures: a note after the failed activation's last bar.
        let mut handled_seen = std::collections::HashSet::new();
        for h in waypoints.iter().flat_map(|w| w.handled.iter()) {
            if !handled_seen.insert((h.node_id.clone(), h.task_key.clone(), h.superstep)) {
                continue;
            }
            let Some(lane) = lanes
                .iter_mut()
                .find(|l| l.node == h.node_id && l.task == h.task_key)
            else {
                continue;
            };
            let Some(at) = records
                .iter()
                .filter(|(step, r)| {
                    *step == h.superstep && r.node_id == h.node_id && r.task_key == h.task_key
                })
                .map(|(_, r)| since(t0, r.started_at) + r.duration_ms as f64)
                .reduce(f64::max)
            else {
                continue;
            };
            lane.marks.push(Placed {
                start: at,
                end: at,
                mark: Mark::Handled {
                    handler: handler_words(h),
                },
            });
        }

        let mut rules = Vec::new();
        for w in waypoints {
            let at = since(t0, w.created_at);
            end = end.max(at);
            match &w.status {
                WaypointStatus::Halted { reason } => rules.push(Rule {
                    at,
                    kind: RuleKind::Halted,
                    text: format!("halted: {reason}"),
                }),
                WaypointStatus::Failed { error, .. } => rules.push(Rule {
                    at,
                    kind: RuleKind::Failed,
                    text: format!("run failed: {error}"),
                }),
                _ if w.superstep > 0 && !w.interrupted => rules.push(Rule {
                    at,
                    kind: RuleKind::Superstep,
                    text: format!("superstep {} barrier", w.superstep),
                }),
                _ => {}
            }
        }

        // Parleys: from the waypoint that asked to the node's next record.
        for (i, w) in waypoints.iter().enumerate() {
            let WaypointStatus::AwaitingInput { requests } = &w.status else {
                continue;
            };
            let asked = since(t0, w.created_at);
            for (node, request) in requests {
                let answered_at = waypoints[i + 1..]
                    .iter()
                    .flat_map(|later| later.records.iter())
                    .filter(|r| r.node_id == *node)
                    .map(|r| since(t0, r.started_at))
                    .find(|at| *at >= asked);
                let lane = lane_of(node, &None, &mut lanes);
                lanes[lane].marks.push(Placed {
                    start: asked,
                    end: answered_at.unwrap_or(asked),
                    mark: Mark::Parley {
                        prompt: request.prompt.clone(),
                        answered: answered_at.is_some(),
                    },
                });
            }
        }
        // An open parley runs to the end of the page.
        for lane in &mut lanes {
            for p in &mut lane.marks {
                if let Mark::Parley {
                    answered: false, ..
                } = p.mark
                {
                    p.end = p.end.max(end);
                }
            }
        }

        Model {
            lanes,
            rules,
            end,
            status: waypoints
                .last()
                .map(|w| w.status.name().to_string())
                .unwrap_or_else(|| "no waypoints".to_string()),
            supersteps: waypoints.iter().map(|w| w.superstep).max().unwrap_or(0),
            attempts,
            spend,
        }
    }
}

/// The index of the lane of `node` (and `task`), added at the end if new.
pub(super) fn lane_of(node: &NodeId, task: &Option<String>, lanes: &mut Vec<Lane>) -> usize {
    match lanes
        .iter()
        .position(|l| l.node == *node && l.task == *task)
    {
        Some(i) => i,
        None => {
            lanes.push(Lane {
                node: node.clone(),
                task: task.clone(),
                marks: Vec::new(),
            });
            lanes.len() - 1
        }
    }
}

pub(super) fn handler_words(h: &HandledFailure) -> String {
    match &h.handler {
        crate::waypoint::HandlerKind::Route { to } => format!("handled: route → {to}"),
        crate::waypoint::HandlerKind::Custom { name } => format!("handled: custom {name}"),
        other => format!("handled: {}", other.name()),
    }
}
