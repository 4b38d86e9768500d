//! Mermaid rendering of a graph.

use std::collections::BTreeMap;
use std::fmt::Write;

use std::time::Duration;

use super::{NodeSpec, WarGraph};
use crate::id::{END, START};
use crate::policy::{Aegis, ErrorHandlerSpec};

/// `s` as the text of a quoted Mermaid label: `#` (which opens Mermaid's
/// entity codes), `"`, `<`, `>` and `&` become entity codes, so a name shows
/// as written and can neither end the label nor inject markup; a line break
/// or other control character becomes a space.
fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '#' => out.push_str("#35;"),
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '&' => out.push_str("#amp;"),
            '|' => out.push_str("#124;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `30s`, `1m30s`, `250ms`, `2h`: the shortest exact reading of `d`.
pub(crate) fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return if d.is_zero() {
            "0s".to_string()
        } else {
            format!("{}µs", d.as_micros())
        };
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}µs", d.as_micros());
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A node's policy as one compact line, e.g. `retry ×5 · run 30s / idle 10s
/// · route → cancel · cache ttl 15m`; empty for no policy. Already escaped
/// for a Mermaid label.
fn badge(aegis: &Aegis) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(retry) = &aegis.retry {
        parts.push(format!("retry ×{}", retry.max_attempts));
    }
    if let Some(timeout) = &aegis.timeout {
        let bounds: Vec<String> = [("run", timeout.run_timeout), ("idle", timeout.idle_timeout)]
            .into_iter()
            .filter_map(|(name, d)| d.map(|d| format!("{name} {}", short_duration(d))))
            .collect();
        if !bounds.is_empty() {
            parts.push(bounds.join(" / "));
        }
    }
    match &aegis.on_error {
        Some(ErrorHandlerSpec::Route { to, .. }) => {
            parts.push(format!("route → {}", label(to.as_str())));
        }
        Some(ErrorHandlerSpec::Absorb { .. }) => parts.push("absorb".to_string()),
        Some(ErrorHandlerSpec::Custom(name)) => parts.push(format!("custom {}", label(name))),
        None => {}
    }
    if let Some(cache) = &aegis.cache {
        parts.push(format!("cache ttl {}", short_duration(cache.ttl)));
    }
    parts.join(" · ")
}

impl WarGraph {
    /// Renders the graph as a Mermaid flowchart: Function nodes as boxes,
    /// Paladin nodes rounded (with their model), worker templates as
    /// parallelograms, Gates as diamonds with labelled approve/reject edges,
    /// Battalions as subgraphs holding their child graph; static edges as
    /// arrows, conditional edges dotted and labelled with their evaluator,
    /// error routes dashed, declared musters ([`WarGraph::declare_muster`])
    /// dashed and labelled `muster` from the mustering node to its worker
    /// template, dynamic targets dashed-outlined.
    ///
    /// Each node's label carries its effective Aegis (its own or the graph
    /// default) as a compact badge under its name: `retry ×5`, `run 30s /
    /// idle 10s`, `route → cancel`, `absorb`, `custom name`, `cache ttl 15m`.
    /// Node ids, models and handler names are escaped (`#`, `"`, `<`, `>`
    /// and `&` as Mermaid entity codes), so any name renders as written.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        self.render_into(&mut out, "", 1);
        let _ = writeln!(out, "    classDef dynamic stroke-dasharray: 5 5");
        let _ = writeln!(out, "    classDef worker fill:#eef,stroke:#55a");
        out
    }

    fn render_into(&self, out: &mut String, prefix: &str, depth: usize) {
        let pad = "    ".repeat(depth);
        // Mermaid ids must be simple; node ids may be anything, so number them.
        let mut ids: BTreeMap<&str, String> = BTreeMap::new();
        ids.insert(START, format!("{prefix}start"));
        ids.insert(END, format!("{prefix}end_"));
        for (i, (id, _)) in self.nodes.iter().enumerate() {
            ids.entry(id.as_str())
                .or_insert_with(|| format!("{prefix}n{i}"));
        }
        let id_of = |n: &str| {
            ids.get(n)
                .cloned()
                .unwrap_or_else(|| format!("{prefix}unknown"))
        };

        let _ = writeln!(out, "{pad}{}([START])", id_of(START));
        let _ = writeln!(out, "{pad}{}([END])", id_of(END));
        for (id, spec) in &self.nodes {
            let me = id_of(id.as_str());
            let name = label(id.as_str());
            let policy = match self.aegis_for(id).map(badge) {
                Some(b) if !b.is_empty() => format!("<br/><small>{b}</small>"),
                _ => String::new(),
            };
            match spec {
                NodeSpec::Function(_) if self.worker_templates.contains(id) => {
                    let _ = writeln!(out, "{pad}{me}[/\"{name}{policy}\"/]:::worker");
                }
                NodeSpec::Function(_) => {
                    let _ = writeln!(out, "{pad}{me}[\"{name}{policy}\"]");
                }
                NodeSpec::Paladin { paladin, .. } => {
                    let _ = writeln!(
                        out,
                        "{pad}{me}(\"{name}<br/><i>{}</i>{policy}\")",
                        label(&paladin.model)
                    );
                }
                NodeSpec::Gate {
                    approve, reject, ..
                } => {
                    let _ = writeln!(out, "{pad}{me}{{\"{name}{policy}\"}}");
                    let _ = writeln!(out, "{pad}{me} -->|approve| {}", id_of(approve.as_str()));
                    let _ = writeln!(out, "{pad}{me} -->|reject| {}", id_of(reject.as_str()));
                }
                NodeSpec::Battalion { child, .. } => {
                    let _ = writeln!(out, "{pad}subgraph {me}[\"{name} (battalion){policy}\"]");
                    child.render_into(out, &format!("{me}_"), depth + 1);
                    let _ = writeln!(out, "{pad}end");
                }
            }
        }
        for (a, b) in &self.edges {
            let _ = writeln!(out, "{pad}{} --> {}", id_of(a.as_str()), id_of(b.as_str()));
        }
        for c in &self.conditional {
            for t in &c.targets {
                let _ = writeln!(
                    out,
                    "{pad}{} -.->|{}| {}",
                    id_of(c.from.as_str()),
                    label(&c.evaluator),
                    id_of(t.as_str())
                );
            }
        }
        for t in &self.dynamic_targets {
            let _ = writeln!(out, "{pad}{}:::dynamic", id_of(t.as_str()));
        }
        for (id, _) in &self.nodes {
            if let Some(ErrorHandlerSpec::Route { to, .. }) =
                self.aegis_for(id).and_then(|a| a.on_error.as_ref())
            {
                let _ = writeln!(
                    out,
                    "{pad}{} -. on_error .-> {}",
                    id_of(id.as_str()),
                    id_of(to.as_str())
                );
            }
        }
        // Declared fan-outs: the mustering node to its worker template.
        for (from, worker) in &self.musters {
            let _ = writeln!(
                out,
                "{pad}{} -.->|muster| {}",
                id_of(from.as_str()),
                id_of(worker.as_str())
            );
        }
    }
}
