//! One run: its status, the actions its state allows, its timeline, its
//! claims, its node attempts and its waypoints.

use std::fmt::Write;
use std::time::SystemTime;

use super::list::{RunRow, reason};
use super::{Nav, action_form, clip, layout, short_fp, state_badge, when};
use crate::console::escape::{escape, url_encode};
use crate::error::{NodeErrorSource, redact_secrets};
use crate::waypoint::{HopNote, NodeExecutionRecord, NodeStatus, Waypoint, WaypointStatus};
use crate::worker::{AttemptInfo, RunState};

/// How many of a thread's latest waypoints the run page's tables show.
const TABLE_WAYPOINTS: usize = 200;

/// What the run page shows of one run.
pub(crate) struct RunView<'a> {
    pub(crate) row: &'a RunRow,
    pub(crate) claims: &'a [AttemptInfo],
    pub(crate) history: &'a [Waypoint],
    pub(crate) csrf: &'a str,
    pub(crate) flash: Option<&'a str>,
}

/// One run.
pub(crate) fn run(view: &RunView<'_>, now: SystemTime) -> String {
    let s = &view.row.status;
    let t = &s.thread_id;
    let mut b = String::new();
    if let Some(flash) = view.flash {
        let _ = write!(b, "<div class=\"flash\">{}</div>", escape(flash));
    }
    let _ = write!(b, "<h1>Run {}</h1><dl>", escape(t));
    let _ = write!(
        b,
        "<dt>State</dt><dd>{}</dd><dt>Graph</dt><dd>{}</dd><dt>Epoch</dt><dd>{}</dd>",
        state_badge(s.state),
        escape(&s.graph_name),
        s.epoch
    );
    if let Some(w) = &s.worker_id {
        let _ = write!(b, "<dt>Worker</dt><dd>{}</dd>", escape(w));
    }
    if let Some(fp) = &s.fingerprint {
        let _ = write!(b, "<dt>Pinned to</dt><dd><code>{}</code></dd>", escape(fp));
    }
    if let Some(prev) = &s.previous_fingerprint {
        let _ = write!(
            b,
            "<dt>Moved from</dt><dd><code>{}</code>{}</dd>",
            escape(prev),
            s.migration
                .as_deref()
                .map(|m| format!(" by migration <code>{}</code>", escape(m)))
                .unwrap_or_default()
        );
    }
    if let Some(t) = view.row.last_activity {
        let _ = write!(b, "<dt>Last activity</dt><dd>{}</dd>", when(t, now));
    }
    let why = reason(view.row);
    if !why.is_empty() {
        let _ = write!(b, "<dt>Why</dt><dd>{why}</dd>");
    }
    b.push_str("</dl>");
    b.push_str(&actions(view));
    b.push_str("<h2>Timeline</h2>");
    if view.row.unreadable.is_some() {
        b.push_str(
            "<p class=\"err\">The thread's waypoints cannot be read (see above): no timeline, \
             node attempts or waypoints to show until its rows are repaired.</p>",
        );
        b.push_str(&claims(view.claims));
        return layout(&format!("Run {t}"), Nav::Runs, &b);
    }
    if view.history.is_empty() {
        b.push_str("<p class=\"muted\">No waypoint yet: the run has not started.</p>");
    } else {
        let _ = write!(
            b,
            "<iframe title=\"timeline\" sandbox style=\"height:{}px\" src=\"/run/timeline?id={}\"></iframe>",
            timeline_height(view.history),
            url_encode(t)
        );
    }
    b.push_str(&claims(view.claims));
    // A long thread's tables show its latest waypoints only: a page stays
    // readable, and its size bounded, whatever the thread's length.
    let shown = &view.history[view.history.len().saturating_sub(TABLE_WAYPOINTS)..];
    if shown.len() < view.history.len() {
        let _ = write!(
            b,
            "<p class=\"note\">The tables below show the latest {} of the thread's {} waypoints; \
             the timeline shows them all.</p>",
            shown.len(),
            view.history.len()
        );
    }
    b.push_str(&node_attempts(shown));
    b.push_str(&waypoints(shown, now));
    layout(&format!("Run {t}"), Nav::Runs, &b)
}

/// The frame's height for the timeline of `history`: its heading and
/// legend, then one 30 px lane per node (per task) and parley, so a short
/// run leaves no empty frame and a long one needs no inner scrolling.
fn timeline_height(history: &[Waypoint]) -> usize {
    let mut lanes = std::collections::HashSet::new();
    for w in history {
        for r in &w.records {
            lanes.insert((r.node_id.to_string(), r.task_key.clone()));
        }
        if let WaypointStatus::AwaitingInput { requests } = &w.status {
            for (node, _) in requests {
                lanes.insert((node.to_string(), None));
            }
        }
    }
    240usize.saturating_add(lanes.len().max(1).saturating_mul(30))
}

fn actions(view: &RunView<'_>) -> String {
    let s = &view.row.status;
    let (t, csrf) = (s.thread_id.as_str(), view.csrf);
    let mut forms = Vec::new();
    if s.state == RunState::AwaitingInput {
        let mut asks = String::new();
        for (node, prompt) in &view.row.parleys {
            let _ = write!(
                asks,
                "<p><code>{}</code> asks: <b>{}</b></p>",
                escape(node),
                escape(prompt)
            );
        }
        forms.push(format!(
            "<div>{asks}{}</div>",
            action_form(
                "/run/answer",
                t,
                csrf,
                "<label>Answer (JSON, or plain text sent as a string)\
                 <textarea name=\"answer\" id=\"answer\" required></textarea></label>\
                 <p><button type=\"submit\" id=\"send-answer\">Send answer</button></p>"
            )
        ));
    }
    if s.state == RunState::Quarantined {
        forms.push(action_form(
            "/run/requeue",
            t,
            csrf,
            "<button type=\"submit\" id=\"release\">Release (requeue)</button>",
        ));
    }
    if s.fault.is_some() && s.state == RunState::Queued {
        forms.push(action_form(
            "/run/retry",
            t,
            csrf,
            "<button type=\"submit\" id=\"retry\">Retry now</button>",
        ));
    }
    if !s.state.is_final() && s.state != RunState::Quarantined {
        forms.push(action_form(
            "/run/cancel",
            t,
            csrf,
            "<button type=\"submit\" class=\"danger\" id=\"cancel\">Cancel run</button>",
        ));
    }
    if forms.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Actions</h2><div class=\"actions\">{}</div>",
        forms.join("")
    )
}

fn claims(claims: &[AttemptInfo]) -> String {
    let mut b = String::from("<h2>Claims</h2>");
    if claims.is_empty() {
        b.push_str("<p class=\"muted\">No worker has claimed it yet.</p>");
        return b;
    }
    b.push_str(
        "<table><thead><tr><th>Epoch</th><th>Worker</th><th>Outcome</th></tr></thead><tbody>",
    );
    for c in claims {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.epoch,
            escape(&c.worker_id),
            escape(&c.outcome)
        );
    }
    b.push_str("</tbody></table>");
    b
}

/// One row per node attempt, from the waypoints' records (each record
/// once: a superstep's progress waypoints repeat it).
fn node_attempts(history: &[Waypoint]) -> String {
    let mut b = String::from("<h2>Node attempts</h2>");
    let mut seen = std::collections::HashSet::new();
    let mut rows = String::new();
    for w in history {
        for r in &w.records {
            if !seen.insert((r.node_id.to_string(), r.task_key.clone(), r.started_at)) {
                continue;
            }
            let node = match &r.task_key {
                Some(k) => format!("{}[{}]", r.node_id, k),
                None => r.node_id.to_string(),
            };
            for a in &r.attempts {
                let how = match &a.error.source {
                    NodeErrorSource::Timeout(_) => "timed out",
                    _ => "failed",
                };
                let _ = write!(
                    rows,
                    "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"err\">{how} ({})</td><td>{} ms</td><td class=\"wrap\">{}</td></tr>",
                    w.superstep,
                    escape(&node),
                    a.attempt,
                    escape(&a.error.transience.to_string()),
                    a.duration_ms,
                    escape(&clip(&redact_secrets(&a.error.source.to_string()), 400))
                        + &hops_in(r, a.attempt, None)
                );
            }
            let outcome = match (&r.status, r.cache_hit) {
                (NodeStatus::Succeeded, true) => "cache hit".to_string(),
                (NodeStatus::Succeeded, false) => "succeeded".to_string(),
                (NodeStatus::Failed, _) => continue,
                (NodeStatus::Skipped { reason }, _) => format!("skipped: {reason}"),
            };
            let origin = r
                .cache_origin
                .as_ref()
                .map(|o| {
                    format!(
                        "served from the cache: produced by {} attempt {}{}",
                        o.node_id,
                        o.attempt,
                        o.served_by
                            .as_deref()
                            .map(|p| format!(" via {p}"))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            // A record times its whole activation; after failed attempts
            // that includes them and the waits between.
            let whole = if r.attempts.is_empty() {
                ""
            } else {
                " <span class=\"muted\">(all attempts and waits)</span>"
            };
            let _ = write!(
                rows,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{} ms{whole}</td><td class=\"wrap\">{}</td></tr>",
                w.superstep,
                escape(&node),
                r.attempt,
                escape(&outcome),
                r.duration_ms,
                escape(&origin) + &hops_in(r, r.attempt, Some(&r.status))
            );
        }
    }
    if rows.is_empty() {
        b.push_str("<p class=\"muted\">No node has run yet.</p>");
        return b;
    }
    b.push_str(
        "<table><thead><tr><th>Superstep</th><th>Node</th><th>Attempt</th><th>Outcome</th>\
         <th>Duration</th><th>Error (redacted) / origin</th></tr></thead><tbody>",
    );
    b.push_str(&rows);
    b.push_str("</tbody></table>");
    b
}

/// The fallback hops of attempt `attempt` of `r`, as escaped HTML: after a
/// success (`ended` Succeeded) "served by X after hop from Y: reason".
fn hops_in(r: &NodeExecutionRecord, attempt: u32, ended: Option<&NodeStatus>) -> String {
    let hops: Vec<&HopNote> = r.hops().iter().filter(|h| h.attempt == attempt).collect();
    let Some(last) = hops.last() else {
        return String::new();
    };
    let why = |h: &HopNote| {
        format!(
            "{} ({})",
            escape(&clip(&redact_secrets(&h.reason), 300)),
            escape(&h.transience.to_string())
        )
    };
    let mut b = String::from("<div class=\"hop\">");
    if matches!(ended, Some(NodeStatus::Succeeded)) {
        let _ = write!(
            b,
            "served by <code>{}</code> (chain position {}) after ",
            escape(&last.to_provider),
            last.position
        );
        if let [only] = hops.as_slice() {
            let _ = write!(
                b,
                "hop from <code>{}</code>: {}</div>",
                escape(&only.from_provider),
                why(only)
            );
            return b;
        }
        let _ = write!(b, "{} hops:", hops.len());
    }
    for h in &hops {
        let _ = write!(
            b,
            "<br>fallback hop from <code>{}</code> to <code>{}</code>: {}",
            escape(&h.from_provider),
            escape(&h.to_provider),
            why(h)
        );
    }
    b.push_str("</div>");
    b
}

fn waypoints(history: &[Waypoint], now: SystemTime) -> String {
    let mut b = String::from("<h2>Waypoints</h2>");
    if history.is_empty() {
        b.push_str("<p class=\"muted\">None yet.</p>");
        return b;
    }
    b.push_str(
        "<table><thead><tr><th>Seq</th><th>Superstep</th><th>Status</th><th>Written</th>\
         <th>Records</th><th>Next</th><th>Graph</th></tr></thead><tbody>",
    );
    for w in history {
        let mut status = w.status.name().to_string();
        if w.interrupted {
            status.push_str(" (mid-superstep)");
        }
        if let WaypointStatus::Failed { error, .. } | WaypointStatus::Halted { reason: error } =
            &w.status
        {
            status = format!("{status}: {}", clip(&redact_secrets(error), 200));
        }
        let next: Vec<String> = w.vanguard.iter().map(|a| a.node_id.to_string()).collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td class=\"wrap\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            w.seq,
            w.superstep,
            escape(&status),
            when(w.created_at, now),
            w.records.len(),
            escape(&clip(&next.join(", "), 120)),
            short_fp(w.fingerprint.as_str())
        );
    }
    b.push_str("</tbody></table>");
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::RunStatus;

    #[test]
    fn a_long_threads_tables_show_its_latest_waypoints() {
        let history: Vec<Waypoint> = (0..250u64)
            .map(|seq| {
                Waypoint::new(
                    "long",
                    seq,
                    WaypointStatus::Running,
                    crate::state::Battlefield::new(),
                )
            })
            .collect();
        let row = RunRow {
            status: RunStatus::new("long", "g", RunState::Running, 1),
            last_activity: None,
            parleys: Vec::new(),
            stranded: None,
            unreadable: None,
        };
        let view = RunView {
            row: &row,
            claims: &[],
            history: &history,
            csrf: "token",
            flash: None,
        };
        let page = run(&view, SystemTime::now());
        assert!(
            page.contains("the latest 200 of the thread's 250 waypoints"),
            "{page}"
        );
        assert_eq!(page.matches("<tr><td>").count(), 200);
        assert!(page.contains("<tr><td>249</td>") && !page.contains("<tr><td>49</td>"));
    }
}
