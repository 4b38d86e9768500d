//! The graph fingerprint: a versioned digest of what a run does.

use super::{NodeSpec, WarGraph};
use crate::canon::Canon;
use crate::state::{CacheMarker, DispatchRule};
use std::sync::Arc;

/// The fingerprint scheme's version, the prefix of every fingerprint.
///
/// Numbered after the guide's scheme: v6 hashes `on_error`, `cache` and a
/// Paladin node's `output_schema`, and excludes `retry` and `timeout`; v7
/// encodes everything through the one canonical encoder (sorted keys and
/// canonical numbers whatever serde_json features the build enables) and
/// hashes a Function node's author-given kind, never a Rust type path.
///
/// Changing the bytes a graph hashes to needs a new version here (and a new
/// golden value in the tests below).
pub const FINGERPRINT_VERSION: &str = "v7";

impl WarGraph {
    /// A stable digest of the graph's shape: schema, nodes, edges, dynamic
    /// targets, declared musters (when any), and each node's effective
    /// `on_error` and `cache` policies.
    ///
    /// The same graph built in any order, in any process, has the same
    /// fingerprint. `retry`, `timeout` and the limits are tuning and are
    /// excluded, so retuning never makes `resume` fail with `GraphMismatch`.
    ///
    /// Computed once and kept until the graph changes.
    pub fn fingerprint(&self) -> String {
        self.shared_fingerprint().to_string()
    }

    /// The fingerprint as every waypoint of a run shares it.
    pub(crate) fn shared_fingerprint(&self) -> Arc<str> {
        self.memo
            .fingerprint
            .get_or_init(|| Arc::from(self.digest()))
            .clone()
    }

    pub(super) fn digest(&self) -> String {
        let mut c = Canon::new("aegis-graph");
        c.str(FINGERPRINT_VERSION);

        let mut fields: Vec<_> = self.schema.fields().iter().collect();
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        c.count(fields.len());
        for f in fields {
            c.str(f.name.as_str())
                .str(match f.dispatch {
                    DispatchRule::LastWrite => "last_write",
                    DispatchRule::Append => "append",
                    DispatchRule::Sum => "sum",
                    DispatchRule::Merge => "merge",
                })
                .serialize(&f.default)
                .bool(f.required)
                .str(match f.cache {
                    CacheMarker::Allow => "allow",
                    CacheMarker::Deny => "deny",
                });
        }

        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        c.count(nodes.len());
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
                        .serialize(output_schema);
                }
                NodeSpec::Battalion {
                    child,
                    inputs,
                    outputs,
                } => {
                    c.str("battalion")
                        .str(&child.fingerprint())
                        .serialize(inputs)
                        .serialize(outputs);
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
                        .serialize(expires_after)
                        .serialize(on_expire)
                        .str(approve.as_str())
                        .str(reject.as_str());
                }
            }
            c.bool(self.worker_templates.contains(id));
            let aegis = self.aegis_for(id);
            c.serialize(&aegis.and_then(|a| a.on_error.as_ref()))
                .serialize(&aegis.and_then(|a| a.cache.as_ref()));
        }

        let mut edges: Vec<_> = self.edges.iter().collect();
        edges.sort();
        edges.dedup();
        c.count(edges.len());
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
        c.count(conditional.len());
        for (from, evaluator, targets) in conditional {
            c.str(from).str(evaluator).count(targets.len());
            for t in targets {
                c.str(t);
            }
        }

        c.count(self.dynamic_targets.len());
        for t in &self.dynamic_targets {
            c.str(t.as_str());
        }
        // Declared fan-outs (they decide which musters a run may make) are
        // hashed only when there are some, so a graph declaring none keeps
        // the fingerprint it had before they existed.
        if !self.musters.is_empty() {
            let mut musters: Vec<_> = self.musters.iter().collect();
            musters.sort();
            musters.dedup();
            c.str("musters").count(musters.len());
            for (from, worker) in musters {
                c.str(from.as_str()).str(worker.as_str());
            }
        }
        format!("{FINGERPRINT_VERSION}:{}", c.hex())
    }
}
