//! Mermaid rendering of a graph.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{END, NodeSpec, START, WarGraph};

impl WarGraph {
    /// Renders the graph as a Mermaid flowchart: nodes (Paladin nodes as
    /// rounded boxes), static edges as arrows, conditional edges dotted and
    /// labelled with their evaluator, dynamic targets and error routes dashed.
    pub fn to_mermaid(&self) -> String {
        // Mermaid ids must be simple; node ids may be anything, so number them.
        let mut ids: BTreeMap<&str, String> = BTreeMap::new();
        ids.insert(START, "start".to_string());
        ids.insert(END, "end_".to_string());
        for (i, (id, _)) in self.nodes.iter().enumerate() {
            ids.entry(id.as_str()).or_insert_with(|| format!("n{i}"));
        }
        let id_of = |n: &str| ids.get(n).cloned().unwrap_or_else(|| "unknown".to_string());
        let label = |s: &str| s.replace('"', "#quot;");

        let mut out = String::from("flowchart TD\n");
        let _ = writeln!(out, "    start([START])");
        let _ = writeln!(out, "    end_([END])");
        for (id, spec) in &self.nodes {
            let shape = match spec {
                NodeSpec::Function(_) => format!("[\"{}\"]", label(id.as_str())),
                NodeSpec::Paladin { paladin, .. } => {
                    format!(
                        "(\"{}<br/><i>{}</i>\")",
                        label(id.as_str()),
                        label(&paladin.model)
                    )
                }
            };
            let _ = writeln!(out, "    {}{shape}", id_of(id.as_str()));
        }
        for (a, b) in &self.edges {
            let _ = writeln!(out, "    {} --> {}", id_of(a.as_str()), id_of(b.as_str()));
        }
        for c in &self.conditional {
            for t in &c.targets {
                let _ = writeln!(
                    out,
                    "    {} -.->|{}| {}",
                    id_of(c.from.as_str()),
                    label(&c.evaluator),
                    id_of(t.as_str())
                );
            }
        }
        for t in &self.dynamic_targets {
            let _ = writeln!(out, "    {}:::dynamic", id_of(t.as_str()));
        }
        for (id, _) in &self.nodes {
            if let Some(crate::aegis::ErrorHandlerSpec::Route { to, .. }) =
                self.aegis_for(id).and_then(|a| a.on_error.as_ref())
            {
                let _ = writeln!(
                    out,
                    "    {} -. on_error .-> {}",
                    id_of(id.as_str()),
                    id_of(to.as_str())
                );
            }
        }
        if !self.dynamic_targets.is_empty() {
            let _ = writeln!(out, "    classDef dynamic stroke-dasharray: 5 5");
        }
        out
    }
}
