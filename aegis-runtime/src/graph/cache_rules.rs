//! Cache rules a graph must satisfy before any node runs: a cache key names
//! declared fields only, a cached Paladin does not write a Deny field, a
//! node-scoped Function node has a code version, and cached nodes need a
//! cache backend on the engine.

use crate::error::{EngineError, PolicyOffender};
use crate::graph::{NodeSpec, WarGraph};
use crate::id::NodeId;
use crate::policy::{Aegis, CacheKeySpec, CacheScope};
use crate::state::CacheMarker;

/// The graph's cache problems, one error per kind, each listing every
/// offender: `CacheKeyFieldUndeclared` (checked on each Aegis value once:
/// the default under `None`, own entries under their node) and
/// `CacheOutputFieldDenied` and `CacheScopeWithoutCodeVersion` (checked on
/// the policy each node actually gets).
pub(crate) fn cache_problems(graph: &WarGraph) -> Vec<EngineError> {
    let schema = graph.schema();
    let entries = graph.aegis_entries();
    let mut undeclared = Vec::new();
    for (node, aegis) in entries {
        if let Some(CacheKeySpec::Fields(fields)) = aegis.cache.as_ref().map(|c| &c.key) {
            for field in fields {
                if schema.field(field.as_str()).is_none() {
                    undeclared.push(PolicyOffender::new(
                        node,
                        format!("cache key names undeclared field `{field}`"),
                    ));
                }
            }
        }
    }

    let mut denied = Vec::new();
    for (id, spec) in graph.nodes() {
        if let NodeSpec::Paladin { output_field, .. } = spec {
            let cached = graph.aegis_for(id).is_some_and(has_cache);
            let deny = schema
                .field(output_field.as_str())
                .is_some_and(|f| f.cache == CacheMarker::Deny);
            if cached && deny {
                denied.push(PolicyOffender::new(
                    Some(id),
                    format!("output field `{output_field}` is marked CacheMarker::Deny"),
                ));
            }
        }
    }

    let unversioned: Vec<NodeId> = graph
        .nodes()
        .filter(|(id, spec)| {
            let node_scoped = graph
                .aegis_for(id)
                .and_then(|a| a.cache.as_ref())
                .is_some_and(|c| c.scope == CacheScope::Node);
            node_scoped && matches!(spec, NodeSpec::Function(n) if n.code_version().is_none())
        })
        .map(|(id, _)| id.clone())
        .collect();

    let mut errors = Vec::new();
    if !undeclared.is_empty() {
        errors.push(EngineError::CacheKeyFieldUndeclared {
            offenders: undeclared,
        });
    }
    if !denied.is_empty() {
        errors.push(EngineError::CacheOutputFieldDenied { offenders: denied });
    }
    if !unversioned.is_empty() {
        errors.push(EngineError::CacheScopeWithoutCodeVersion { nodes: unversioned });
    }
    errors
}

/// Every node whose effective Aegis carries a cache policy, in declaration
/// order.
pub(crate) fn cached_nodes(graph: &WarGraph) -> Vec<NodeId> {
    graph
        .nodes()
        .filter(|(id, _)| graph.aegis_for(id).is_some_and(has_cache))
        .map(|(id, _)| id.clone())
        .collect()
}

/// `CachePolicyWithoutCacheBackend` for an engine without a node cache,
/// naming every cached node; `None` when no node is cached.
pub(crate) fn missing_backend_error(graph: &WarGraph) -> Option<EngineError> {
    let nodes = cached_nodes(graph);
    (!nodes.is_empty()).then_some(EngineError::CachePolicyWithoutCacheBackend { nodes })
}

fn has_cache(aegis: &Aegis) -> bool {
    aegis.cache.is_some()
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StateNodeError;
    use crate::graph::Paladin;
    use crate::graph::{Directive, InputMapping, StateNode};
    use crate::graph::{EngineLimits, NodeContext};
    use crate::id::{END, START};
    use crate::policy::{CachePolicy, CacheScope};
    use crate::state::{Battlefield, DispatchRule, FieldName, FieldSpec};
    use crate::state::{BattlefieldSchema, StateDelta};
    use std::time::Duration;

    struct Noop;
    #[async_trait::async_trait]
    impl StateNode for Noop {
        fn kind_name(&self) -> &str {
            "noop"
        }

        async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
            Ok(Directive::edges(StateDelta::new()))
        }
    }

    fn f(n: &str) -> FieldName {
        FieldName::new(n).unwrap()
    }

    fn cache(key: CacheKeySpec) -> Aegis {
        Aegis::new().with_cache(CachePolicy::new(Duration::from_secs(60), key))
    }

    fn graph() -> WarGraph {
        let schema = BattlefieldSchema::new(vec![
            FieldSpec::new(f("question"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(f("answer"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(f("secret"), DispatchRule::LastWrite, None, false)
                .with_cache(CacheMarker::Deny),
            FieldSpec::new(f("audit_log"), DispatchRule::Append, None, false)
                .with_cache(CacheMarker::Deny),
        ]);
        let mut g = WarGraph::new(schema, EngineLimits::default());
        g.add_node(
            "answerer",
            NodeSpec::paladin(
                Paladin::new("A").with_model("m"),
                InputMapping::new("Answer: {question}"),
                f("answer"),
            ),
        )
        .add_node(
            "leaker",
            NodeSpec::paladin(
                Paladin::new("L").with_model("m"),
                InputMapping::new("{question}"),
                f("secret"),
            ),
        )
        .add_node("scorer", NodeSpec::function(Noop))
        .add_edge(START, "answerer")
        .add_edge("answerer", "leaker")
        .add_edge("leaker", "scorer")
        .add_edge("scorer", END);
        g
    }

    #[test]
    fn a_graph_without_cache_policies_has_no_cache_problems() {
        let g = graph();
        assert!(cache_problems(&g).is_empty());
        assert!(cached_nodes(&g).is_empty());
        assert_eq!(missing_backend_error(&g), None);
    }

    #[test]
    fn fields_naming_undeclared_fields_are_reported_per_aegis() {
        let mut g = graph();
        g.set_aegis(
            "answerer",
            cache(CacheKeySpec::Fields(vec![f("question"), f("questoin")])),
        )
        .set_aegis("scorer", cache(CacheKeySpec::Fields(vec![f("nope")])))
        .with_default_aegis(cache(CacheKeySpec::Fields(vec![f("missing")])));
        let problems = cache_problems(&g);
        let Some(EngineError::CacheKeyFieldUndeclared { offenders }) = problems.first() else {
            panic!("{problems:?}");
        };
        let text: Vec<String> = offenders.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "default Aegis: cache key names undeclared field `missing`",
                "`answerer`: cache key names undeclared field `questoin`",
                "`scorer`: cache key names undeclared field `nope`",
            ]
        );
    }

    #[test]
    fn a_cached_paladin_writing_a_deny_field_is_rejected() {
        let mut g = graph();
        // Through the default Aegis: `leaker` has no entry of its own.
        g.with_default_aegis(cache(CacheKeySpec::Default));
        let problems = cache_problems(&g);
        assert_eq!(
            problems,
            [EngineError::CacheOutputFieldDenied {
                offenders: vec![PolicyOffender::new(
                    Some(&NodeId::new("leaker")),
                    "output field `secret` is marked CacheMarker::Deny"
                )]
            }]
        );
        assert!(problems[0].to_string().contains("`leaker`"));

        // Its own entry without a cache wins wholesale: no longer cached.
        g.set_aegis("leaker", Aegis::default());
        assert!(cache_problems(&g).is_empty());
    }

    #[test]
    fn both_kinds_are_reported_together() {
        let mut g = graph();
        g.set_aegis("leaker", cache(CacheKeySpec::Fields(vec![f("typo")])));
        let kinds: Vec<_> = cache_problems(&g)
            .iter()
            .map(std::mem::discriminant)
            .collect();
        assert_eq!(kinds.len(), 2);
    }

    #[test]
    fn cached_nodes_follow_the_effective_policy() {
        let mut g = graph();
        g.with_default_aegis(cache(CacheKeySpec::Default))
            .set_aegis("leaker", Aegis::default());
        assert_eq!(
            cached_nodes(&g),
            [NodeId::new("answerer"), NodeId::new("scorer")]
        );
        let err = missing_backend_error(&g).unwrap();
        assert_eq!(
            err,
            EngineError::CachePolicyWithoutCacheBackend {
                nodes: vec![NodeId::new("answerer"), NodeId::new("scorer")]
            }
        );
        assert!(err.to_string().contains("`answerer`, `scorer`"));
    }

    #[test]
    fn a_node_scoped_function_node_needs_a_code_version() {
        let node_scoped = |key| {
            let mut a = cache(key);
            if let Some(c) = a.cache.as_mut() {
                c.scope = CacheScope::Node;
            }
            a
        };
        let mut g = graph();
        // Through the default: `scorer` (a Function node without a code
        // version) is offended; the Paladin nodes have their shape.
        g.with_default_aegis(node_scoped(CacheKeySpec::Default))
            .set_aegis("leaker", Aegis::default());
        let problems = cache_problems(&g);
        assert_eq!(
            problems,
            [EngineError::CacheScopeWithoutCodeVersion {
                nodes: vec![NodeId::new("scorer")]
            }]
        );
        assert!(problems[0].to_string().contains("`scorer`"));

        // With a version it may be node-scoped; graph-scoped it needs none.
        g.add_node(
            "versioned",
            NodeSpec::function(
                crate::graph::FnNode::new("versioned", |_, _| {
                    Box::pin(async { Ok(Directive::edges(StateDelta::new())) })
                })
                .with_code_version("1"),
            ),
        );
        g.set_aegis("scorer", cache(CacheKeySpec::Default));
        assert!(cache_problems(&g).is_empty(), "{:?}", cache_problems(&g));
    }
}
