//! The graph manifest: the shape of a graph a waiting thread depends on
//! (each node's kind, each field's dispatch rule), stored with the thread so
//! that a resume on a changed graph can say what changed and whether the
//! thread can go on.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{NodeSpec, WarGraph};
use crate::error::GraphChange;
use crate::id::NodeId;
use crate::state::{DispatchRule, FieldName};

/// The shape of a graph as a waiting thread sees it.
///
/// `Eq`, so comparing two `Arc`s of one manifest (as every waypoint write
/// does) stops at the pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GraphManifest {
    /// Every node, by id.
    pub nodes: BTreeMap<NodeId, NodeShape>,
    /// Every declared field, by name.
    pub fields: BTreeMap<FieldName, FieldShape>,
}

/// A node as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeShape {
    /// `function:{kind_name}`, `paladin:{output field}`, `battalion` or
    /// `gate`: what the node is, never how it is tuned.
    pub kind: String,
    /// Whether it is a worker template.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub worker: bool,
}

/// A field as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FieldShape {
    /// How writes merge.
    pub dispatch: DispatchRule,
    /// Whether it has a default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_default: bool,
    /// Whether the initial input must set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// A node's kind as the manifest records it.
pub(crate) fn node_kind(spec: &NodeSpec) -> String {
    match spec {
        NodeSpec::Function(n) => format!("function:{}", n.kind_name()),
        NodeSpec::Paladin { output_field, .. } => format!("paladin:{output_field}"),
        NodeSpec::Battalion { .. } => "battalion".to_owned(),
        NodeSpec::Gate { .. } => "gate".to_owned(),
    }
}

impl WarGraph {
    /// This graph's manifest: what is stored with each thread it runs.
    pub fn manifest(&self) -> GraphManifest {
        GraphManifest::clone(&self.shared_manifest())
    }

    /// The manifest every waypoint of a run shares, built once per graph
    /// (until a builder method changes it) rather than once per run.
    pub(crate) fn shared_manifest(&self) -> Arc<GraphManifest> {
        self.memo
            .manifest
            .get_or_init(|| Arc::new(self.build_manifest()))
            .clone()
    }

    fn build_manifest(&self) -> GraphManifest {
        GraphManifest {
            nodes: self
                .nodes
                .iter()
                .map(|(id, spec)| {
                    let shape = NodeShape {
                        kind: node_kind(spec),
                        worker: self.worker_templates.contains(id),
                    };
                    (id.clone(), shape)
                })
                .collect(),
            fields: self
                .schema
                .fields()
                .iter()
                .map(|f| {
                    let shape = FieldShape {
                        dispatch: f.dispatch,
                        has_default: f.default.is_some(),
                        required: f.required,
                    };
                    (f.name.clone(), shape)
                })
                .collect(),
        }
    }
}

impl GraphManifest {
    /// Every node and field difference from `self` (the old graph) to `new`,
    /// nodes first, each group by name.
    pub fn changes_to(&self, new: &GraphManifest) -> Vec<GraphChange> {
        let mut changes = Vec::new();
        for (node, old) in &self.nodes {
            match new.nodes.get(node) {
                None => changes.push(GraphChange::NodeRemoved {
                    node: node.clone(),
                    kind: old.kind.clone(),
                }),
                Some(now) => {
                    if now.kind != old.kind {
                        changes.push(GraphChange::NodeKindChanged {
                            node: node.clone(),
                            from: old.kind.clone(),
                            to: now.kind.clone(),
                        });
                    }
                    if now.worker != old.worker {
                        changes.push(GraphChange::WorkerTemplateChanged {
                            node: node.clone(),
                            now_worker: now.worker,
                        });
                    }
                }
            }
        }
        for (node, now) in &new.nodes {
            if !self.nodes.contains_key(node) {
                changes.push(GraphChange::NodeAdded {
                    node: node.clone(),
                    kind: now.kind.clone(),
                });
            }
        }
        for (field, old) in &self.fields {
            match new.fields.get(field) {
                None => changes.push(GraphChange::FieldRemoved {
                    field: field.clone(),
                }),
                Some(now) if now.dispatch != old.dispatch => {
                    changes.push(GraphChange::FieldDispatchChanged {
                        field: field.clone(),
                        from: old.dispatch,
                        to: now.dispatch,
                    });
                }
                Some(_) => {}
            }
        }
        for field in new.fields.keys() {
            if !self.fields.contains_key(field) {
                changes.push(GraphChange::FieldAdded {
                    field: field.clone(),
                });
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::EngineLimits;
    use crate::state::{BattlefieldSchema, FieldSpec, StateDelta};

    fn graph(fields: &[(&str, DispatchRule)], nodes: &[(&str, &'static str)]) -> WarGraph {
        let schema = BattlefieldSchema::new(
            fields
                .iter()
                .map(|(n, d)| FieldSpec::new(FieldName::new(n).unwrap(), *d, None, false))
                .collect(),
        );
        let mut g = WarGraph::new(schema, EngineLimits::default());
        for (id, kind) in nodes {
            g.add_node(
                *id,
                NodeSpec::from_fn(kind, |_, _| {
                    Box::pin(async { Ok(StateDelta::new().into()) })
                }),
            );
        }
        g
    }

    #[test]
    fn the_manifest_diff_names_every_node_and_field_change() {
        let old = graph(
            &[("a", DispatchRule::LastWrite), ("b", DispatchRule::Append)],
            &[("x", "x"), ("y", "y")],
        )
        .manifest();
        let new = graph(
            &[("a", DispatchRule::Sum), ("c", DispatchRule::LastWrite)],
            &[("x", "x2"), ("z", "z")],
        )
        .manifest();
        let f = |n: &str| FieldName::new(n).unwrap();
        assert_eq!(
            old.changes_to(&new),
            vec![
                GraphChange::NodeKindChanged {
                    node: "x".into(),
                    from: "function:x".into(),
                    to: "function:x2".into()
                },
                GraphChange::NodeRemoved {
                    node: "y".into(),
                    kind: "function:y".into()
                },
                GraphChange::NodeAdded {
                    node: "z".into(),
                    kind: "function:z".into()
                },
                GraphChange::FieldDispatchChanged {
                    field: f("a"),
                    from: DispatchRule::LastWrite,
                    to: DispatchRule::Sum
                },
                GraphChange::FieldRemoved { field: f("b") },
                GraphChange::FieldAdded { field: f("c") },
            ]
        );
        assert_eq!(old.changes_to(&old), vec![]);
    }

    #[test]
    fn a_manifest_round_trips_through_json() {
        let m = graph(&[("a", DispatchRule::Merge)], &[("x", "x")]).manifest();
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<GraphManifest>(&text).unwrap(), m);
    }
}
