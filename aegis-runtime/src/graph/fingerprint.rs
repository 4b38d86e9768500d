//! The graph fingerprint: a versioned digest of what a run does.

use sha2::{Digest, Sha256};

use super::{NodeSpec, WarGraph};
use crate::state::{CacheMarker, DispatchRule};

/// The fingerprint scheme's version, the prefix of every fingerprint.
///
/// Numbered after the guide's scheme: v6 hashes `on_error`, `cache` and a
/// Paladin node's `output_schema`, and excludes `retry` and `timeout`.
pub const FINGERPRINT_VERSION: &str = "v6";

/// A canonical, length-prefixed byte stream: no two different graphs can
/// produce the same bytes by shifting a boundary between two strings.
pub(crate) struct Canon(Sha256);

impl Canon {
    pub(crate) fn new(domain: &str) -> Self {
        let mut c = Canon(Sha256::new());
        c.str(domain);
        c
    }

    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.0.update((s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
        self
    }

    pub(crate) fn u64(&mut self, n: u64) -> &mut Self {
        self.0.update(n.to_le_bytes());
        self
    }

    /// Canonical JSON: serde_json's maps are sorted by key.
    pub(crate) fn json(&mut self, v: &impl serde::Serialize) -> &mut Self {
        let s = serde_json::to_string(v).unwrap_or_else(|e| format!("<unserialisable: {e}>"));
        self.str(&s)
    }

    pub(crate) fn hex(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl WarGraph {
    /// A stable digest of the graph's shape: schema, nodes, edges, dynamic
    /// targets, and each node's effective `on_error` and `cache` policies.
    ///
    /// The same graph built in any order, in any process, has the same
    /// fingerprint. `retry`, `timeout` and the limits are tuning and are
    /// excluded, so retuning never makes `resume` fail with `GraphMismatch`.
    ///
    /// Computed once and kept until the graph changes.
    pub fn fingerprint(&self) -> String {
        self.memo.fingerprint.get_or_init(|| self.digest()).clone()
    }

    pub(super) fn digest(&self) -> String {
        let mut c = Canon::new("aegis-graph");
        c.str(FINGERPRINT_VERSION);

        let mut fields: Vec<_> = self.schema.fields().iter().collect();
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        c.u64(fields.len() as u64);
        for f in fields {
            c.str(f.name.as_str())
                .str(match f.dispatch {
                    DispatchRule::LastWrite => "last_write",
                    DispatchRule::Append => "append",
                    DispatchRule::Sum => "sum",
                    DispatchRule::Merge => "merge",
                })
                .json(&f.default)
                .u64(u64::from(f.required))
                .str(match f.cache {
                    CacheMarker::Allow => "allow",
                    CacheMarker::Deny => "deny",
                });
        }

        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        c.u64(nodes.len() as u64);
        for (id, spec) in nodes {
            c.str(id.as_str());
            match spec {
                NodeSpec::Function(n) => {
                    c.str("function").str(n.kind_name());
                }
                NodeSpec::Paladin {
                    paladin,
                    input,
                    output_field,
                    output_schema,
                } => {
                    c.str("paladin")
                        .str(&paladin.config_fingerprint())
                        .str(input.template())
                        .str(output_field.as_str())
                        .json(output_schema);
                }
                NodeSpec::Battalion {
                    child,
                    inputs,
                    outputs,
                } => {
                    c.str("battalion")
                        .str(&child.fingerprint())
                        .json(inputs)
                        .json(outputs);
                }
                NodeSpec::Gate {
                    prompt,
                    expires_after,
                    on_expire,
                    approve,
                    reject,
                } => {
                    c.str("gate")
                        .str(prompt)
                        .json(expires_after)
                        .json(on_expire)
                        .str(approve.as_str())
                        .str(reject.as_str());
                }
            }
            c.u64(u64::from(self.worker_templates.contains(id)));
            let aegis = self.aegis_for(id);
            c.json(&aegis.and_then(|a| a.on_error.as_ref()))
                .json(&aegis.and_then(|a| a.cache.as_ref()));
        }

        let mut edges: Vec<_> = self.edges.iter().collect();
        edges.sort();
        edges.dedup();
        c.u64(edges.len() as u64);
        for (a, b) in edges {
            c.str(a.as_str()).str(b.as_str());
        }

        let mut conditional: Vec<_> = self
            .conditional
            .iter()
            .map(|e| {
                let mut t: Vec<_> = e.targets.iter().map(|t| t.as_str()).collect();
                t.sort();
                (e.from.as_str(), e.evaluator.as_str(), t)
            })
            .collect();
        conditional.sort();
        c.u64(conditional.len() as u64);
        for (from, evaluator, targets) in conditional {
            c.str(from).str(evaluator).u64(targets.len() as u64);
            for t in targets {
                c.str(t);
            }
        }

        c.u64(self.dynamic_targets.len() as u64);
        for t in &self.dynamic_targets {
            c.str(t.as_str());
        }
        format!("{FINGERPRINT_VERSION}:{}", c.hex())
    }
}
