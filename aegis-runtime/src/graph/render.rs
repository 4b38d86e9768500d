//! Mermaid rendering of a graph.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{NodeSpec, WarGraph};
use crate::aegis::ErrorHandlerSpec;
use crate::id::{END, START};

fn label(s: &str) -> String {
    s.replace('"', "#quot;")
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
            match spec {
                NodeSpec::Function(_) if self.worker_templates.contains(id) => {
                    let _ = writeln!(out, "{pad}{me}[/\"{name}\"/]:::worker");
                }
                NodeSpec::Function(_) => {
                    let _ = writeln!(out, "{pad}{me}[\"{name}\"]");
                }
                NodeSpec::Paladin { paladin, .. } => {
                    let _ = writeln!(
                        out,
                        "{pad}{me}(\"{name}<br/><i>{}</i>\")",
                        label(&paladin.model)
                    );
                }
                NodeSpec::Gate {
                    approve, reject, ..
                } => {
                    let _ = writeln!(out, "{pad}{me}{{\"{name}\"}}");
                    let _ = writeln!(out, "{pad}{me} -->|approve| {}", id_of(approve.as_str()));
                    let _ = writeln!(out, "{pad}{me} -->|reject| {}", id_of(reject.as_str()));
                }
                NodeSpec::Battalion { child, .. } => {
                    let _ = writeln!(out, "{pad}subgraph {me}[\"{name} (battalion)\"]");
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
