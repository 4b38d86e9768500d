//! A thread's run as a timeline: one lane per node (per task for a muster),
//! each attempt a bar coloured by its outcome.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::html::{clip, esc, ms, px};
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::id::NodeId;
use crate::policy::Spend;
use crate::trace::TraceEvent;
use crate::waypoint::{HandledFailure, NodeExecutionRecord, NodeStatus, Waypoint, WaypointStatus};

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
        page(&title, &model)
    }
}

// ---------------------------------------------------------------------------
// The model: lanes of marks on one time axis, in milliseconds since the run
// began.

/// How an attempt ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Transient,
    Permanent,
    Unknown,
    Timeout,
    Skipped,
}

impl Outcome {
    fn of(error: &NodeError) -> Self {
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
    fn class(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Transient => "failed-transient",
            Outcome::Permanent => "failed-permanent",
            Outcome::Unknown => "failed-unknown",
            Outcome::Timeout => "timeout",
            Outcome::Skipped => "skipped",
        }
    }

    fn words(self) -> &'static str {
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
enum Mark {
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
struct Placed {
    start: f64,
    end: f64,
    mark: Mark,
}

#[derive(Debug)]
struct Lane {
    node: NodeId,
    task: Option<String>,
    marks: Vec<Placed>,
}

impl Lane {
    fn name(&self) -> String {
        match &self.task {
            Some(t) => format!("{}[{t}]", self.node),
            None => self.node.to_string(),
        }
    }
}

/// A line across every lane.
#[derive(Debug)]
struct Rule {
    at: f64,
    kind: RuleKind,
    text: String,
}

#[derive(Debug, PartialEq, Eq)]
enum RuleKind {
    Superstep,
    Halted,
    Failed,
}

#[derive(Debug)]
struct Model {
    lanes: Vec<Lane>,
    rules: Vec<Rule>,
    end: f64,
    status: String,
    supersteps: u32,
    attempts: usize,
    /// What the thread's model calls spent, when any was metered.
    spend: Option<Spend>,
}

fn since(t0: SystemTime, t: SystemTime) -> f64 {
    t.duration_since(t0).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0
}

/// `detail` followed by what became of each effect of `r`'s attempt
/// `attempt` (`effect charge aegis-…: done`), one per line.
fn effects_of(r: &NodeExecutionRecord, attempt: u32, detail: Option<String>) -> Option<String> {
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

/// Key of an attempt in the trace: node, task, attempt, superstep.
type AttemptKey = (NodeId, Option<String>, u32, u32);

/// What the trace adds: backoff delays by the attempt about to run (its
/// task unset for a node's own retry) and hops by attempt.
#[derive(Default)]
struct TraceFacts {
    delays: HashMap<AttemptKey, Option<Duration>>,
    hops: HashMap<AttemptKey, Vec<(String, String)>>,
}

impl TraceFacts {
    fn read(thread: &str, trace: &[TraceEvent]) -> Self {
        let mut facts = TraceFacts::default();
        let mut open: Vec<AttemptKey> = Vec::new();
        for event in trace {
            match event {
                TraceEvent::NodeStarted {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                } if thread_id == thread => {
                    open.push((node_id.clone(), task_key.clone(), *attempt, *superstep));
                }
                TraceEvent::NodeFinished {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    ..
                } if thread_id == thread => {
                    let key = (node_id.clone(), task_key.clone(), *attempt, *superstep);
                    open.retain(|k| *k != key);
                }
                TraceEvent::TaskRetryScheduled {
                    thread_id,
                    superstep,
                    node_id,
                    task_key,
                    attempt,
                    delay,
                } if thread_id == thread => {
                    let key = (
                        node_id.clone(),
                        Some(task_key.clone()),
                        *attempt,
                        *superstep,
                    );
                    facts.delays.insert(key, Some(*delay));
                }
                TraceEvent::RetryScheduled {
                    thread_id,
                    superstep,
                    node_id,
                    attempt,
                    delay,
                } if thread_id == thread => {
                    // The event names no task (a trace of an older version
                    // retried tasks with it): tasks that waited differently
                    // leave the wait unknown (the wall clock's).
                    facts
                        .delays
                        .entry((node_id.clone(), None, *attempt, *superstep))
                        .and_modify(|d| {
                            if *d != Some(*delay) {
                                *d = None;
                            }
                        })
                        .or_insert(Some(*delay));
                }
                TraceEvent::FallbackHop {
                    node_id,
                    from_provider,
                    to_provider,
                } => {
                    let running = match node_id {
                        Some(n) => open.iter().rev().find(|k| k.0 == *n),
                        None => open.last(),
                    };
                    if let Some(key) = running {
                        facts
                            .hops
                            .entry(key.clone())
                            .or_default()
                            .push((from_provider.clone(), to_provider.clone()));
                    }
                }
                _ => {}
            }
        }
        facts
    }
}

impl Model {
    fn build(waypoints: &[Waypoint], trace: &[TraceEvent]) -> Self {
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
fn lane_of(node: &NodeId, task: &Option<String>, lanes: &mut Vec<Lane>) -> usize {
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

fn handler_words(h: &HandledFailure) -> String {
    match &h.handler {
        crate::waypoint::HandlerKind::Route { to } => format!("handled: route → {to}"),
        crate::waypoint::HandlerKind::Custom { name } => format!("handled: custom {name}"),
        other => format!("handled: {}", other.name()),
    }
}

// ---------------------------------------------------------------------------
// Drawing.

const LABEL_W: f64 = 230.0;
const CHART_W: f64 = 1080.0;
const RIGHT_PAD: f64 = 50.0;
const AXIS_H: f64 = 34.0;
const ROW_H: f64 = 30.0;
const BAR_H: f64 = 16.0;
const FOOT_H: f64 = 30.0;
const MIN_BAR: f64 = 3.0;

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px 20px; color: #1d2330; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; }
.summary { color: #555; margin: 0 0 10px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 0 0 10px; font-size: 12px; }
.legend span { display: inline-flex; align-items: center; gap: 5px; }
.legend i { display: inline-block; width: 14px; height: 10px; border-radius: 2px; }
svg { font: 12px system-ui, -apple-system, "Segoe UI", sans-serif; }
.lane-bg { fill: #f6f7f9; }
.lane-label { fill: #1d2330; }
.lane-task { fill: #55607a; }
.axis line { stroke: #d5d9e0; }
.axis text { fill: #6b7280; font-size: 11px; }
.bar rect { stroke: rgba(0,0,0,.25); stroke-width: .5; }
.bar text { fill: #fff; font-size: 11px; font-weight: 600; pointer-events: none; }
.succeeded rect, i.succeeded { fill: #2f9e5b; background: #2f9e5b; }
.failed-transient rect, i.failed-transient { fill: #e8912d; background: #e8912d; }
.failed-permanent rect, i.failed-permanent { fill: #d64541; background: #d64541; }
.failed-unknown rect, i.failed-unknown { fill: #8e6bbf; background: #8e6bbf; }
.timeout rect, i.timeout { fill: #a0522d; background: #a0522d; }
.skipped rect, i.skipped { fill: #9aa1ad; background: #9aa1ad; }
.cache-hit rect, i.cache-hit { fill: #1f9fb4; background: #1f9fb4; }
.cache-hit text, .handled text, .hop text { fill: #1d2330; font-weight: 400; font-size: 11px; }
.backoff line { stroke: #6b7280; stroke-width: 2; stroke-dasharray: 4 3; }
i.backoff { background: repeating-linear-gradient(90deg, #6b7280 0 4px, transparent 4px 7px); height: 2px; }
.hop path { fill: #fff; stroke: #1d2330; stroke-width: 1.2; }
i.hop { background: #fff; border: 1.2px solid #1d2330; transform: rotate(45deg); width: 8px; height: 8px; border-radius: 0; }
.handled path { fill: #d64541; }
i.handled { background: #d64541; width: 8px; }
.parley rect { fill: #fff6cf; stroke: #c9a227; stroke-dasharray: 5 3; }
.parley text { fill: #6b5500; font-size: 11px; }
i.parley { background: #fff6cf; border: 1px dashed #c9a227; }
.rule line { stroke-width: 1.5; }
.rule.superstep line { stroke: #c3c8d1; stroke-dasharray: 2 3; stroke-width: 1; }
.rule.superstep text { fill: #8a93a3; font-size: 10px; }
.rule.halted line, .rule.failed line { stroke: #c0392b; }
.rule.halted text, .rule.failed text { fill: #c0392b; font-size: 11px; font-weight: 600; }
.empty { fill: #6b7280; }
.axis-note { fill: #8a93a3; font-size: 10px; }
"#;

fn legend() -> String {
    let items = [
        ("succeeded", "attempt succeeded"),
        ("failed-transient", "failed, transient"),
        ("failed-permanent", "failed, permanent"),
        ("failed-unknown", "failed, unknown"),
        ("timeout", "timed out"),
        ("skipped", "skipped"),
        ("cache-hit", "cache hit"),
        ("backoff", "backoff wait"),
        ("hop", "fallback hop"),
        ("handled", "handled failure"),
        ("parley", "parley (awaiting input)"),
    ];
    let mut out = String::from("<div class=\"legend\">");
    for (class, words) in items {
        let _ = write!(out, "<span><i class=\"{class}\"></i>{words}</span>");
    }
    out.push_str("</div>");
    out
}

/// A tick step of 1, 2 or 5 × 10^k ms giving at most about 10 ticks.
fn tick_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn page(title: &str, model: &Model) -> String {
    let span = model.end.max(1.0);
    let x = |t: f64| LABEL_W + (t / span).clamp(0.0, 1.0) * CHART_W;
    let height = AXIS_H + ROW_H * model.lanes.len().max(1) as f64 + FOOT_H;
    let width = LABEL_W + CHART_W + RIGHT_PAD;
    let lanes_bottom = AXIS_H + ROW_H * model.lanes.len().max(1) as f64;

    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{t}\">",
        w = px(width),
        h = px(height),
        t = esc(title)
    );

    // Lane backgrounds and labels.
    for (i, lane) in model.lanes.iter().enumerate() {
        let top = AXIS_H + ROW_H * i as f64;
        if i % 2 == 0 {
            let _ = write!(
                svg,
                "<rect class=\"lane-bg\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                px(top),
                px(width),
                px(ROW_H)
            );
        }
        let full = lane.name();
        let _ = write!(
            svg,
            "<g class=\"lane\" data-node=\"{}\"{}><title>{}</title>",
            esc(lane.node.as_str()),
            lane.task
                .as_ref()
                .map(|t| format!(" data-task=\"{}\"", esc(t)))
                .unwrap_or_default(),
            esc(&full)
        );
        let baseline = px(top + ROW_H / 2.0 + 4.0);
        match &lane.task {
            Some(task) => {
                let _ = write!(
                    svg,
                    "<text class=\"lane-label\" x=\"8\" y=\"{baseline}\">{}<tspan class=\"lane-task\"> [{}]</tspan></text>",
                    esc(&clip(lane.node.as_str(), 16)),
                    esc(&clip(task, 12))
                );
            }
            None => {
                let _ = write!(
                    svg,
                    "<text class=\"lane-label\" x=\"8\" y=\"{baseline}\">{}</text>",
                    esc(&clip(lane.node.as_str(), 30))
                );
            }
        }
        svg.push_str("</g>");
    }

    // The time axis.
    let step = tick_step(span);
    svg.push_str("<g class=\"axis\">");
    let mut t = 0.0;
    while t <= span + 0.5 {
        let tx = x(t);
        let _ = write!(
            svg,
            "<line x1=\"{tx}\" y1=\"{}\" x2=\"{tx}\" y2=\"{}\"/><text x=\"{tx}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(AXIS_H - 6.0),
            px(lanes_bottom),
            px(AXIS_H - 12.0),
            ms(t),
            tx = px(tx)
        );
        t += step;
    }
    svg.push_str("</g>");

    // Superstep barriers, halts, failures. A barrier's number is left out
    // where it would overprint the previous one (its line and hover stay).
    let mut last_label_x = f64::NEG_INFINITY;
    for rule in &model.rules {
        let rx = px(x(rule.at));
        let (class, label_y) = match rule.kind {
            RuleKind::Superstep => ("superstep", lanes_bottom + 12.0),
            RuleKind::Halted => ("halted", lanes_bottom + 24.0),
            RuleKind::Failed => ("failed", lanes_bottom + 24.0),
        };
        let anchor = if x(rule.at) > LABEL_W + CHART_W * 0.8 {
            "end"
        } else {
            "middle"
        };
        let shown = match rule.kind {
            RuleKind::Superstep if x(rule.at) - last_label_x < 14.0 => String::new(),
            RuleKind::Superstep => {
                last_label_x = x(rule.at);
                rule.text
                    .trim_start_matches("superstep ")
                    .trim_end_matches(" barrier")
                    .to_string()
            }
            _ => clip(&rule.text, 60),
        };
        let _ = write!(
            svg,
            "<g class=\"rule {class}\"><title>{} at {}</title><line x1=\"{rx}\" y1=\"{}\" x2=\"{rx}\" y2=\"{}\"/><text x=\"{rx}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text></g>",
            esc(&rule.text),
            ms(rule.at),
            px(AXIS_H - 6.0),
            px(lanes_bottom + 2.0),
            px(label_y),
            esc(&shown)
        );
    }

    if model.rules.iter().any(|r| r.kind == RuleKind::Superstep) {
        let _ = write!(
            svg,
            "<text class=\"axis-note\" x=\"8\" y=\"{}\">superstep ends</text>",
            px(lanes_bottom + 12.0)
        );
    }
    if model.lanes.is_empty() {
        let _ = write!(
            svg,
            "<text class=\"empty\" x=\"{}\" y=\"{}\">nothing ran in this thread</text>",
            px(LABEL_W),
            px(AXIS_H + ROW_H / 2.0 + 4.0)
        );
    }

    // The marks: parleys under everything else on their lane.
    for (i, lane) in model.lanes.iter().enumerate() {
        let top = AXIS_H + ROW_H * i as f64;
        let bar_y = top + (ROW_H - BAR_H) / 2.0;
        let mid = top + ROW_H / 2.0;
        let who = lane.name();
        let mut ordered: Vec<&Placed> = lane.marks.iter().collect();
        ordered.sort_by_key(|m| !matches!(m.mark, Mark::Parley { .. }));
        for m in ordered {
            let x0 = x(m.start);
            let w = (x(m.end) - x0).max(MIN_BAR);
            let took = ms(m.end - m.start);
            match &m.mark {
                Mark::Attempt {
                    attempt,
                    outcome,
                    detail,
                    hops,
                    includes_wait,
                } => {
                    let mut tip = format!(
                        "{who} — attempt {attempt}: {} after {took}",
                        outcome.words()
                    );
                    if let Some(d) = detail {
                        let _ = write!(tip, "\n{d}");
                    }
                    if *includes_wait {
                        tip.push_str("\n(the bar includes the backoff wait before this attempt)");
                    }
                    for (from, to) in hops {
                        let _ = write!(tip, "\nfallback hop: {from} → {to}");
                    }
                    let _ = write!(
                        svg,
                        "<g class=\"bar attempt {}\" data-node=\"{}\" data-attempt=\"{attempt}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/>",
                        outcome.class(),
                        esc(lane.node.as_str()),
                        esc(&tip),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H)
                    );
                    // The bar's own words, as many as fit: `#2 run timeout`,
                    // `#1 primary → backup`, or just `#2`.
                    let mut words = vec![format!("#{attempt}")];
                    if let (Outcome::Timeout, Some(d)) = (outcome, detail) {
                        words.push(d.trim_end_matches(" elapsed").to_string());
                    }
                    for (from, to) in hops {
                        words.push(format!("{from} → {to}"));
                    }
                    let mut text = String::new();
                    for word in words {
                        let candidate = if text.is_empty() {
                            word
                        } else {
                            format!("{text} · {word}")
                        };
                        if w >= 10.0 + 6.8 * candidate.chars().count() as f64 {
                            text = candidate;
                        } else {
                            break;
                        }
                    }
                    if !text.is_empty() {
                        let indent = if hops.is_empty() { 5.0 } else { 8.0 };
                        let _ = write!(
                            svg,
                            "<text x=\"{}\" y=\"{}\">{}</text>",
                            px(x0 + indent),
                            px(mid + 4.0),
                            esc(&text)
                        );
                    }
                    svg.push_str("</g>");
                    // Each hop is a diamond on the bar's left edge: the
                    // chain hopped during this attempt (when, a waypoint
                    // does not say).
                    for (k, (from, to)) in hops.iter().enumerate() {
                        let _ = write!(
                            svg,
                            "<g class=\"hop\" data-node=\"{}\" data-attempt=\"{attempt}\"><title>{}</title><path d=\"M{} {} l5 5 l-5 5 l-5 -5 z\"/></g>",
                            esc(lane.node.as_str()),
                            esc(&format!(
                                "{who} — attempt {attempt}: fallback hop {from} → {to}"
                            )),
                            px(x0 + 10.0 * k as f64),
                            px(mid - 5.0),
                        );
                    }
                }
                Mark::Backoff { before_attempt } => {
                    let _ = write!(
                        svg,
                        "<g class=\"wait backoff\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\"/><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/></g>",
                        esc(lane.node.as_str()),
                        esc(&format!(
                            "{who} — backoff {took} before attempt {before_attempt}"
                        )),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H),
                        px(x0),
                        px(mid),
                        px(x0 + w),
                        px(mid)
                    );
                }
                Mark::CacheHit => {
                    let _ = write!(
                        svg,
                        "<g class=\"bar cache-hit\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/><text x=\"{}\" y=\"{}\">cache hit</text></g>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — served from the cache in {took}")),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H),
                        px(x0 + w + 4.0),
                        px(mid + 4.0)
                    );
                }
                Mark::Handled { handler } => {
                    let hx = x(m.start);
                    let _ = write!(
                        svg,
                        "<g class=\"handled\" data-node=\"{}\"><title>{}</title><path d=\"M{} {} l8 -6 v12 z\"/><text x=\"{}\" y=\"{}\">{}</text></g>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — final failure {handler}")),
                        px(hx + 2.0),
                        px(mid),
                        px(hx + 13.0),
                        px(mid + 4.0),
                        esc(&clip(handler.trim_start_matches("handled: "), 28))
                    );
                }
                Mark::Parley { prompt, answered } => {
                    let state = if *answered {
                        "answered"
                    } else {
                        "awaiting input"
                    };
                    let _ = write!(
                        svg,
                        "<g class=\"parley\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — parley ({state}) for {took}: {prompt}")),
                        px(x0),
                        px(top + 3.0),
                        px(w),
                        px(ROW_H - 6.0)
                    );
                    let text = format!("parley: {}", clip(prompt, 60));
                    if w >= 8.0 * 12.0 {
                        let _ = write!(
                            svg,
                            "<text x=\"{}\" y=\"{}\">{}</text>",
                            px(x0 + 8.0),
                            px(mid + 4.0),
                            esc(&clip(&text, ((w - 16.0) / 6.5) as usize))
                        );
                    }
                    svg.push_str("</g>");
                }
            }
        }
    }
    svg.push_str("</svg>");

    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p class=\"summary\">{} · {} supersteps · {} attempts · {} lanes · {}{}</p>\n{}\n{svg}\n</body>\n</html>\n",
        esc(&model.status),
        model.supersteps,
        model.attempts,
        model.lanes.len(),
        ms(model.end),
        model
            .spend
            .map(|s| format!(" · spent {}", esc(&s.to_string())))
            .unwrap_or_default(),
        legend(),
        t = esc(title)
    );
    html
}
