//! The console's pages as HTML text: one layout, one function per page.
//! Every value goes through [`escape`] (and every error text through
//! [`redact_secrets`] first); links carry values through [`url_encode`].

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::escape::{escape, url_encode};
use crate::error::{NodeErrorSource, redact_secrets};
use crate::waypoint::{NodeStatus, Waypoint, WaypointStatus};
use crate::worker::{AttemptInfo, PinnedRun, RunFault, RunState, RunStatus};

const STYLE: &str = "
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d232b;background:#f5f6f8}
header{background:#1f2937;color:#fff;padding:10px 24px;display:flex;gap:28px;align-items:center}
header b{font-size:16px;letter-spacing:.3px}
header a{color:#cbd5e1;text-decoration:none;padding:4px 2px}
header a.on{color:#fff;border-bottom:2px solid #60a5fa}
main{padding:18px 24px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px;word-break:break-all}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d8dde4;table-layout:auto}
th,td{text-align:left;padding:6px 9px;border-bottom:1px solid #e5e8ed;vertical-align:top}
th{background:#eef1f5;font-weight:600;white-space:nowrap}
td.nw{white-space:nowrap}
td.wrap{word-break:break-word;max-width:560px;min-width:240px}
td.id{word-break:break-all;max-width:280px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.s{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;white-space:nowrap}
.s-completed{background:#dcfce7;color:#166534}.s-failed{background:#fee2e2;color:#991b1b}
.s-awaiting_input{background:#fef9c3;color:#854d0e}.s-quarantined{background:#ede9fe;color:#5b21b6}
.s-queued{background:#e0f2fe;color:#075985}.s-running{background:#dbeafe;color:#1e40af}
.s-cancelled{background:#e5e7eb;color:#374151}
.muted{color:#6b7280}.err{color:#991b1b}
form.filters{display:flex;gap:12px;align-items:end;margin-bottom:14px;flex-wrap:wrap}
label{display:flex;flex-direction:column;font-size:12px;color:#4b5563;gap:3px}
select,input[type=text],textarea{font:inherit;padding:5px 7px;border:1px solid #c4cad3;border-radius:4px;background:#fff}
textarea{width:100%;max-width:640px;min-height:70px;font-family:ui-monospace,monospace}
button{font:inherit;padding:5px 14px;border-radius:4px;border:1px solid #2563eb;background:#2563eb;color:#fff;cursor:pointer}
button.danger{background:#fff;color:#b91c1c;border-color:#b91c1c}
.actions{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start;background:#fff;border:1px solid #d8dde4;padding:12px;margin:8px 0}
.actions form{margin:0}
.note{background:#fff7ed;border:1px solid #fed7aa;padding:8px 12px;margin:10px 0}
.flash{background:#ecfdf5;border:1px solid #a7f3d0;padding:8px 12px;margin:0 0 12px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;background:#fff;border:1px solid #d8dde4;padding:12px;margin:0}
dt{color:#4b5563}dd{margin:0;word-break:break-all}
iframe{width:100%;height:460px;border:1px solid #d8dde4;background:#fff}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
";

/// How many of a thread's latest waypoints the run page's tables show.
pub(crate) const TABLE_WAYPOINTS: usize = 200;

/// Which page the navigation marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Runs,
    Pinned,
    Providers,
    None,
}

/// The page around `body`.
pub(crate) fn layout(title: &str, nav: Nav, body: &str) -> String {
    let link = |href: &str, label: &str, this: Nav| {
        let on = if nav == this { " class=\"on\"" } else { "" };
        format!("<a href=\"{href}\"{on}>{label}</a>")
    };
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · Aegis console</title><style>{STYLE}</style></head><body>\
         <header><b>Aegis console</b>{}{}{}</header><main>{body}</main></body></html>",
        escape(title),
        link("/", "Runs", Nav::Runs),
        link("/pinned", "Pinned fingerprints", Nav::Pinned),
        link("/providers", "Provider health", Nav::Providers),
    )
}

/// A page that says one thing (an action's failure, a missing run).
pub(crate) fn message(title: &str, text: &str) -> String {
    layout(
        title,
        Nav::None,
        &format!(
            "<h1>{}</h1><p class=\"err\">{}</p><p><a href=\"/\">All runs</a></p>",
            escape(title),
            escape(&redact_secrets(text))
        ),
    )
}

fn state_badge(state: RunState) -> String {
    format!("<span class=\"s s-{0}\">{0}</span>", state.as_str())
}

fn run_link(thread_id: &str) -> String {
    format!(
        "<a href=\"/run?id={}\">{}</a>",
        url_encode(thread_id),
        escape(thread_id)
    )
}

/// At most `max` characters of `s`, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A span for people: `45s`, `12m`, `3h`, `2d`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn when(t: SystemTime, now: SystemTime) -> String {
    let ago = now
        .duration_since(t)
        .map(|d| format!("{} ago", span(d)))
        .unwrap_or_else(|_| "just now".to_string());
    format!(
        "<span title=\"{}\">{ago}</span>",
        escape(&httpdate::fmt_http_date(t))
    )
}

fn short_fp(fp: &str) -> String {
    format!(
        "<code title=\"{}\">{}</code>",
        escape(fp),
        escape(&clip(fp, 14))
    )
}

/// One run of the list, with what the page adds to its status.
pub(crate) struct RunRow {
    pub(crate) status: RunStatus,
    /// When its latest waypoint was written.
    pub(crate) last_activity: Option<SystemTime>,
    /// The questions it waits on (node, prompt).
    pub(crate) parleys: Vec<(String, String)>,
    /// Set when no live worker runs the fingerprint it is pinned to.
    pub(crate) stranded: Option<PinnedRun>,
    /// Its latest waypoint could not be read.
    pub(crate) unreadable: Option<String>,
}

/// Why a run stands where it stands, in one line (already escaped).
fn reason(row: &RunRow) -> String {
    let s = &row.status;
    let mut parts: Vec<String> = Vec::new();
    if let Some(fault) = &s.fault {
        let held = if s.state == RunState::Quarantined {
            "quarantined: "
        } else {
            "held back: "
        };
        parts.push(format!(
            "<span class=\"err\">{held}{}</span>",
            escape(&clip(&redact_secrets(&fault.to_string()), 240))
        ));
    }
    // The question a run waits on; a quarantined one asks it again once
    // released. A run already answered and running asks nothing.
    let asks = matches!(s.state, RunState::AwaitingInput | RunState::Quarantined);
    for (node, prompt) in row.parleys.iter().filter(|_| asks) {
        parts.push(format!(
            "parley at <code>{}</code>: {}",
            escape(node),
            escape(&clip(prompt, 160))
        ));
    }
    if let Some(pinned) = &row.stranded {
        parts.push(stranded_reason(pinned));
    } else if let Some(w) = &s.waiting_reason {
        parts.push(escape(&clip(&short_fingerprints(w), 300)));
    }
    if let (RunState::Failed, Some(e)) = (s.state, &s.error) {
        parts.push(format!(
            "<span class=\"err\">{}</span>",
            escape(&clip(&redact_secrets(e), 240))
        ));
    }
    // An unreadable-waypoint fault already says what reading them says.
    let said = matches!(s.fault, Some(RunFault::UnreadableWaypoint { .. }));
    if let Some(e) = row.unreadable.as_ref().filter(|_| !said) {
        parts.push(format!(
            "<span class=\"err\">waypoints unreadable: {}</span>",
            escape(&clip(&redact_secrets(e), 200))
        ));
    }
    parts.join("<br>")
}

fn stranded_reason(pinned: &PinnedRun) -> String {
    let mut out = format!(
        "pinned to {}, which no live worker runs",
        short_fp(&pinned.fingerprint)
    );
    if pinned.verdicts.is_empty() {
        out.push_str("; no live graph has judged it yet");
    }
    for v in &pinned.verdicts {
        if v.compatible {
            let _ = write!(out, "; {} can continue it", short_fp(&v.fingerprint));
        } else {
            let _ = write!(
                out,
                "; {} cannot: {}",
                short_fp(&v.fingerprint),
                escape(&clip(
                    &short_fingerprints(v.reason.as_deref().unwrap_or("incompatible")),
                    300
                ))
            );
        }
    }
    out
}

/// The filters the runs page was asked for, as the form shows them.
pub(crate) struct Filters<'a> {
    pub(crate) state: Option<RunState>,
    pub(crate) graph: Option<&'a str>,
    pub(crate) age: Option<&'a str>,
}

/// The age filter's choices: (value, label).
pub(crate) const AGES: &[(&str, &str)] = &[
    ("lt5m", "active in the last 5 min"),
    ("lt1h", "active in the last hour"),
    ("lt1d", "active in the last day"),
    ("gt5m", "idle over 5 min"),
    ("gt1h", "idle over an hour"),
    ("gt1d", "idle over a day"),
];

const STATES: &[RunState] = &[
    RunState::Queued,
    RunState::Running,
    RunState::AwaitingInput,
    RunState::Completed,
    RunState::Failed,
    RunState::Cancelled,
    RunState::Quarantined,
];

fn option(value: &str, label: &str, selected: bool) -> String {
    format!(
        "<option value=\"{}\"{}>{}</option>",
        escape(value),
        if selected { " selected" } else { "" },
        escape(label)
    )
}

/// The runs list.
pub(crate) fn runs(
    rows: &[RunRow],
    filters: &Filters<'_>,
    graphs: &[String],
    max: usize,
    now: SystemTime,
) -> String {
    let mut b = String::from("<h1>Runs</h1><form class=\"filters\" method=\"get\" action=\"/\">");
    b.push_str("<label>State<select name=\"state\">");
    b.push_str(&option("", "any", filters.state.is_none()));
    for s in STATES {
        b.push_str(&option(s.as_str(), s.as_str(), filters.state == Some(*s)));
    }
    b.push_str("</select></label><label>Graph<select name=\"graph\">");
    b.push_str(&option("", "any", filters.graph.is_none()));
    for g in graphs {
        b.push_str(&option(g, g, filters.graph == Some(g.as_str())));
    }
    if let Some(g) = filters.graph.filter(|g| !graphs.iter().any(|x| x == g)) {
        b.push_str(&option(g, g, true));
    }
    b.push_str("</select></label><label>Age<select name=\"age\">");
    b.push_str(&option("", "any", filters.age.is_none()));
    for (value, label) in AGES {
        b.push_str(&option(value, label, filters.age == Some(*value)));
    }
    b.push_str("</select></label><button type=\"submit\">Filter</button></form>");
    if rows.is_empty() {
        b.push_str("<p class=\"muted\">No run matches.</p>");
        return layout("Runs", Nav::Runs, &b);
    }
    let _ = write!(
        b,
        "<p class=\"muted\">{} run{} (the latest {max} submitted at most).</p>",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    b.push_str(
        "<table><thead><tr><th>Thread</th><th>Graph</th><th>State</th><th>Epoch</th>\
         <th>Worker</th><th>Last activity</th><th>Why</th></tr></thead><tbody>",
    );
    for row in rows {
        let s = &row.status;
        let _ = write!(
            b,
            "<tr><td class=\"id\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
            run_link(&s.thread_id),
            escape(&s.graph_name),
            state_badge(s.state),
            s.epoch,
            s.worker_id.as_deref().map(escape).unwrap_or_default(),
            match (row.last_activity, &row.unreadable) {
                (Some(t), _) => when(t, now),
                (None, Some(_)) => "<span class=\"err\">unreadable</span>".to_string(),
                (None, None) => "<span class=\"muted\">never ran</span>".to_string(),
            },
            reason(row)
        );
    }
    b.push_str("</tbody></table>");
    layout("Runs", Nav::Runs, &b)
}

/// A hidden form field.
fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        escape(value)
    )
}

fn action_form(path: &str, thread: &str, csrf: &str, inner: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{path}\">{}{}{inner}</form>",
        hidden("thread", thread),
        hidden("csrf", csrf)
    )
}

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

/// `text` with every graph fingerprint (`v7:` and 64 hex digits) cut to
/// its first 10 digits: a verdict's reason names two, and the reason
/// itself comes after them.
fn short_fingerprints(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('v') {
        out.push_str(&rest[..at]);
        let candidate = &rest[at..];
        let digits = candidate[1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(candidate.len() - 1);
        let after = &candidate[1 + digits..];
        let hex = after
            .strip_prefix(':')
            .map(|h| h.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(h.len()))
            .unwrap_or(0);
        if digits > 0 && hex == 64 {
            let keep = 1 + digits + 1 + 10;
            out.push_str(&candidate[..keep]);
            out.push('…');
            rest = &candidate[1 + digits + 1 + 64..];
        } else {
            out.push('v');
            rest = &candidate[1..];
        }
    }
    out.push_str(rest);
    out
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
                escape(&origin)
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

/// The pinned-fingerprints page: every fingerprint the listed runs are
/// pinned to with their states, then the stranded runs with verdicts.
pub(crate) fn pinned(statuses: &[RunStatus], stranded: &[PinnedRun]) -> String {
    let mut b = String::from("<h1>Pinned fingerprints</h1>");
    b.push_str(
        "<p class=\"muted\">A thread is pinned to the fingerprint of the graph that first \
         claimed it; only a worker running that graph, or a graph that judged it compatible, \
         continues it (docs/DEPLOYING.md).</p>",
    );
    let mut by_fp: BTreeMap<(&str, &str), BTreeMap<&str, usize>> = BTreeMap::new();
    for s in statuses {
        if let Some(fp) = &s.fingerprint {
            *by_fp
                .entry((s.graph_name.as_str(), fp.as_str()))
                .or_default()
                .entry(s.state.as_str())
                .or_default() += 1;
        }
    }
    let stranded_fps: HashMap<&str, usize> = stranded.iter().fold(HashMap::new(), |mut m, p| {
        *m.entry(p.fingerprint.as_str()).or_default() += 1;
        m
    });
    b.push_str("<table><thead><tr><th>Graph</th><th>Fingerprint</th><th>Runs by state</th><th>Stranded runs</th></tr></thead><tbody>");
    for ((graph, fp), states) in &by_fp {
        let counts: Vec<String> = states
            .iter()
            .map(|(s, n)| format!("<span class=\"s s-{s}\">{s}</span> {n}"))
            .collect();
        let live = match stranded_fps.get(fp) {
            Some(n) => {
                format!("<span class=\"err\">{n}: no live worker runs this fingerprint</span>")
            }
            None => "<span class=\"muted\">none</span>".to_string(),
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{live}</td></tr>",
            escape(graph),
            escape(fp),
            counts.join(" &nbsp; ")
        );
    }
    b.push_str("</tbody></table><h2>Stranded runs</h2>");
    if stranded.is_empty() {
        b.push_str("<p class=\"muted\">None: a live worker runs every fingerprint an unfinished run is pinned to.</p>");
        return layout("Pinned fingerprints", Nav::Pinned, &b);
    }
    b.push_str("<table><thead><tr><th>Thread</th><th>Graph</th><th>State</th><th>Verdicts of the live graphs</th></tr></thead><tbody>");
    for p in stranded {
        let _ = write!(
            b,
            "<tr><td class=\"id\">{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
            run_link(&p.thread_id),
            escape(&p.graph_name),
            state_badge(p.state),
            stranded_reason(p)
        );
    }
    b.push_str("</tbody></table>");
    layout("Pinned fingerprints", Nav::Pinned, &b)
}

/// What the attempt records say of one provider.
#[derive(Default)]
pub(crate) struct ProviderHealth {
    pub(crate) failures: usize,
    pub(crate) transient: usize,
    pub(crate) threads: std::collections::BTreeSet<String>,
    pub(crate) last: Option<(SystemTime, String)>,
    pub(crate) kinds: BTreeMap<String, usize>,
    pub(crate) cache_served: usize,
    /// The latest attempt its circuit breaker refused (`CircuitOpen`): when,
    /// and the cool-down it had left then.
    pub(crate) breaker_open: Option<(SystemTime, Option<Duration>)>,
}

/// Adds what `history` records of providers to `health`.
pub(crate) fn tally_providers(history: &[Waypoint], health: &mut BTreeMap<String, ProviderHealth>) {
    let mut seen = std::collections::HashSet::new();
    for w in history {
        for r in &w.records {
            if !seen.insert((r.node_id.to_string(), r.task_key.clone(), r.started_at)) {
                continue;
            }
            if let Some(p) = r.cache_origin.as_ref().and_then(|o| o.served_by.as_ref()) {
                health.entry(p.clone()).or_default().cache_served += 1;
            }
            for a in &r.attempts {
                let NodeErrorSource::Llm {
                    status,
                    provider,
                    kind,
                    message,
                } = &a.error.source
                else {
                    continue;
                };
                let name = provider.clone().unwrap_or_else(|| "(unnamed)".to_string());
                let h = health.entry(name).or_default();
                h.failures += 1;
                if a.error.transience == crate::error::Transience::Transient {
                    h.transient += 1;
                }
                h.threads.insert(w.thread_id.to_string());
                let label = match status {
                    Some(s) => format!("{kind} (HTTP {s})"),
                    None => kind.clone(),
                };
                *h.kinds.entry(label.clone()).or_default() += 1;
                if kind == "CircuitOpen" && h.breaker_open.is_none_or(|(t, _)| t <= a.started_at) {
                    h.breaker_open = Some((a.started_at, a.error.retry_after));
                }
                if h.last.as_ref().is_none_or(|(t, _)| *t <= a.started_at) {
                    h.last = Some((a.started_at, format!("{label}: {message}")));
                }
            }
        }
    }
}

/// The provider-health page.
pub(crate) fn providers(
    health: &BTreeMap<String, ProviderHealth>,
    scanned: usize,
    now: SystemTime,
) -> String {
    let mut b = String::from("<h1>Provider health</h1>");
    let _ = write!(
        b,
        "<div class=\"note\">Circuit-breaker state is not recorded in the fleet: each worker \
         process keeps its breakers in memory. The breaker column shows the latest attempt a \
         breaker refused (a <code>CircuitOpen</code> error), when one was recorded; it may have \
         closed since. What the queue's rows do record is every failed \
         LLM attempt with its provider, status and transience; below, those of the latest {scanned} \
         run{} (and which providers served cached results). A fallback chain that failed as a \
         whole counts against its last provider; hops inside a call that succeeded leave no \
         row.</div>",
        if scanned == 1 { "" } else { "s" }
    );
    if health.is_empty() {
        b.push_str("<p class=\"muted\">No LLM provider error recorded.</p>");
        return layout("Provider health", Nav::Providers, &b);
    }
    b.push_str(
        "<table><thead><tr><th>Provider</th><th>Failed attempts</th><th>Transient</th>\
         <th>Threads</th><th>By kind</th><th>Last failure</th><th>Breaker (as recorded)</th>\
         <th>Cache entries served</th></tr></thead><tbody>",
    );
    for (name, h) in health {
        let kinds: Vec<String> = h
            .kinds
            .iter()
            .map(|(k, n)| format!("{} × {n}", escape(k)))
            .collect();
        let last = h
            .last
            .as_ref()
            .map(|(t, m)| {
                format!(
                    "{}<br><span class=\"mono\">{}</span>",
                    when(*t, now),
                    escape(&clip(&redact_secrets(m), 300))
                )
            })
            .unwrap_or_default();
        let breaker = match h.breaker_open {
            Some((t, cool_down)) => format!(
                "<span class=\"err\">open</span> {}{}",
                when(t, now),
                match cool_down {
                    Some(d) if d < Duration::from_secs(86400 * 365) => {
                        format!(", cool-down {} left then", span(d))
                    }
                    _ => String::new(),
                }
            ),
            None => "<span class=\"muted\">no open breaker recorded</span>".to_string(),
        };
        let _ = write!(
            b,
            "<tr><td class=\"nw\"><b>{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{last}</td><td>{breaker}</td><td>{}</td></tr>",
            escape(name),
            h.failures,
            h.transient,
            h.threads.len(),
            kinds.join("<br>"),
            h.cache_served
        );
    }
    b.push_str("</tbody></table>");
    layout("Provider health", Nav::Providers, &b)
}

/// The sign-in page of a console with a token.
pub(crate) fn login(csrf: &str, failed: bool) -> String {
    let mut b = String::from("<h1>Sign in</h1>");
    if failed {
        b.push_str("<p class=\"err\">That is not this console's token.</p>");
    }
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/login\">{}<label>Bearer token\
         <input type=\"text\" name=\"token\" autocomplete=\"off\"></label>\
         <p><button type=\"submit\">Sign in</button></p></form>",
        hidden("csrf", csrf)
    );
    layout("Sign in", Nav::None, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(span(Duration::from_secs(45)), "45s");
        assert_eq!(span(Duration::from_secs(600)), "10m");
        assert_eq!(span(Duration::from_secs(7200)), "2h");
        assert_eq!(span(Duration::from_secs(3 * 86400)), "3d");
    }

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

    #[test]
    fn providers_are_tallied_from_records_with_the_latest_open_breaker() {
        use crate::error::{NodeError, Transience};
        use crate::id::NodeId;
        use crate::waypoint::{AttemptRecord, NodeExecutionRecord};
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let failed = |secs: u64, kind: &str, status: Option<u16>, retry_after: Option<Duration>| {
            let source = NodeErrorSource::Llm {
                status,
                provider: Some("openai".into()),
                kind: kind.into(),
                message: "Bearer sk-live-0123456789abcdef refused".into(),
            };
            AttemptRecord {
                attempt: 1,
                started_at: t0 + Duration::from_secs(secs),
                duration_ms: 5,
                error: NodeError::new(NodeId::new("ask"), 1, Transience::Transient, source)
                    .with_retry_after(retry_after),
            }
        };
        let mut w = Waypoint::new(
            "t1",
            1,
            WaypointStatus::Running,
            crate::state::Battlefield::new(),
        );
        w.records = vec![
            NodeExecutionRecord::new(NodeId::new("ask"), NodeStatus::Succeeded, 3, t0, 50)
                .with_attempts(vec![
                    failed(1, "ProviderError", Some(503), None),
                    failed(2, "CircuitOpen", None, Some(Duration::from_secs(30))),
                ]),
        ];
        // A progress waypoint repeating the record counts once.
        let history = vec![w.clone(), w];
        let mut health = BTreeMap::new();
        tally_providers(&history, &mut health);
        let h = &health["openai"];
        assert_eq!((h.failures, h.transient, h.threads.len()), (2, 2, 1));
        assert_eq!(
            h.breaker_open,
            Some((t0 + Duration::from_secs(2), Some(Duration::from_secs(30))))
        );
        let page = providers(&health, 1, t0 + Duration::from_secs(62));
        assert!(page.contains("<span class=\"err\">open</span>"), "{page}");
        assert!(page.contains("cool-down 30s left then"), "{page}");
        assert!(page.contains("ProviderError (HTTP 503) × 1"));
        assert!(!page.contains("sk-live-0123456789abcdef"), "{page}");
    }

    #[test]
    fn only_a_waiting_or_quarantined_run_shows_its_question() {
        let row = |state| RunRow {
            status: RunStatus::new("t", "g", state, 1),
            last_activity: None,
            parleys: vec![("approval".into(), "Publish?".into())],
            stranded: None,
            unreadable: None,
        };
        assert!(reason(&row(RunState::AwaitingInput)).contains("Publish?"));
        assert!(reason(&row(RunState::Quarantined)).contains("Publish?"));
        // Answered, and resumed by a worker: the latest waypoint still
        // holds the question, the run no longer asks it.
        assert_eq!(reason(&row(RunState::Running)), "");
        assert_eq!(reason(&row(RunState::Queued)), "");
    }

    #[test]
    fn fingerprints_in_a_reason_are_cut_and_the_rest_kept() {
        let a = format!("v7:{}", "ab".repeat(32));
        let b = format!("v12:{}", "0f".repeat(32));
        let text = format!("run with graph {a}, this graph is {b}: the node `approval` is gone");
        assert_eq!(
            short_fingerprints(&text),
            "run with graph v7:ababababab…, this graph is v12:0f0f0f0f0f…: the node `approval` is gone"
        );
        // Short hex, no digits after `v`, or text ending in `v`: unchanged.
        for same in ["v7:abc", "vx:", "every value", "v", "v7:"] {
            assert_eq!(short_fingerprints(same), same);
        }
    }

    #[test]
    fn a_hostile_thread_is_escaped_in_text_and_link() {
        let row = RunRow {
            status: RunStatus::new("<img src=x onerror=alert(1)", "g\"'", RunState::Failed, 1)
                .with_error(Some(
                    "<script>alert(1)</script> Bearer sk-live-abcdefghijklmnop",
                )),
            last_activity: None,
            parleys: vec![("<b>n".into(), "<i>why".into())],
            stranded: None,
            unreadable: None,
        };
        let page = runs(
            std::slice::from_ref(&row),
            &Filters {
                state: None,
                graph: Some("<svg onload=x>"),
                age: None,
            },
            &[],
            10,
            SystemTime::now(),
        );
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<svg"), "{page}");
        assert!(!page.contains("<b>n"), "{page}");
        assert!(!page.contains("sk-live-abcdefghijklmnop"), "{page}");
        assert!(page.contains("/run?id=%3Cimg%20src%3Dx%20onerror%3Dalert%281%29"));
        assert!(page.contains("&lt;script&gt;"));
    }
}
