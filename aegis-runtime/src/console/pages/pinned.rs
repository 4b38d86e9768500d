//! The fingerprints runs are pinned to, and the stranded runs.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::list::stranded_reason;
use super::{Nav, layout, run_link, state_badge};
use crate::console::escape::escape;
use crate::worker::{PinnedRun, RunStatus};

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
