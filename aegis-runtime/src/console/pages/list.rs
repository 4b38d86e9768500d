//! The runs list, and why each run stands where it stands.

use std::fmt::Write;
use std::time::SystemTime;

use super::{Nav, clip, layout, option, run_link, short_fp, state_badge, when};
use crate::console::escape::escape;
use crate::error::redact_secrets;
use crate::worker::{PinnedRun, RunFault, RunState, RunStatus};

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
pub(super) fn reason(row: &RunRow) -> String {
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

pub(super) fn stranded_reason(pinned: &PinnedRun) -> String {
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
const AGES: &[(&str, &str)] = &[
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

#[cfg(test)]
mod tests {
    use super::*;

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
