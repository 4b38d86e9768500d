//! The rules of declared fan-outs (`WarGraph::declare_muster`): both ends
//! are declared nodes, the worker end is a worker template and the other
//! is not (a task cannot muster), and each pair is declared once.

use std::collections::BTreeSet;

use crate::error::{EngineError, PolicyOffender};
use crate::graph::WarGraph;
use crate::id::NodeId;

/// One `MusterDeclarationInvalid` error listing every offender, or none.
pub(crate) fn muster_problems(graph: &WarGraph) -> Option<EngineError> {
    let declared: BTreeSet<&NodeId> = graph.nodes.iter().map(|(id, _)| id).collect();
    let mut seen = BTreeSet::new();
    let mut offenders = Vec::new();
    for (from, worker) in &graph.musters {
        if !declared.contains(from) {
            offenders.push(PolicyOffender::new(
                Some(from),
                format!("declared to muster `{worker}`, but `{from}` is not a node of this graph"),
            ));
        } else if graph.worker_templates.contains(from) {
            offenders.push(PolicyOffender::new(
                Some(from),
                format!(
                    "declared to muster `{worker}`, but `{from}` is a worker template, whose \
                     tasks may only contribute a delta and cannot muster"
                ),
            ));
        }
        if !declared.contains(worker) {
            offenders.push(PolicyOffender::new(
                Some(from),
                format!("declared to muster `{worker}`, which is not a node of this graph"),
            ));
        } else if !graph.worker_templates.contains(worker) {
            offenders.push(PolicyOffender::new(
                Some(from),
                format!(
                    "declared to muster `{worker}`, which is not a worker template \
                     (declare it with `add_worker_template`)"
                ),
            ));
        }
        if !seen.insert((from, worker)) {
            offenders.push(PolicyOffender::new(
                Some(from),
                format!("declares its muster of `{worker}` twice"),
            ));
        }
    }
    (!offenders.is_empty()).then_some(EngineError::MusterDeclarationInvalid { offenders })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{EngineLimits, NodeSpec};
    use crate::id::{END, START};
    use crate::state::BattlefieldSchema;

    fn graph() -> WarGraph {
        let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
        g.add_node("planner", NodeSpec::noop())
            .add_worker_template("answer", NodeSpec::noop())
            .add_node("summarize", NodeSpec::noop())
            .add_edge(START, "planner")
            .add_edge("planner", "summarize")
            .add_edge("summarize", END);
        g
    }

    #[test]
    fn a_declared_muster_to_a_worker_template_validates() {
        let mut g = graph();
        g.declare_muster("planner", "answer");
        assert_eq!(g.validate(), Ok(()));
        assert_eq!(
            g.musters().collect::<Vec<_>>(),
            [(&NodeId::new("planner"), &NodeId::new("answer"))]
        );
    }

    #[test]
    fn every_bad_declaration_is_listed_in_one_error() {
        let mut g = graph();
        g.declare_muster("planner", "answer")
            .declare_muster("ghost", "answer")
            .declare_muster("planner", "phantom")
            .declare_muster("planner", "summarize")
            .declare_muster("answer", "answer")
            .declare_muster("planner", "answer");
        let reasons: Vec<String> = match g.validate() {
            Err(EngineError::MusterDeclarationInvalid { offenders }) => {
                offenders.iter().map(ToString::to_string).collect()
            }
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(
            reasons,
            [
                "`ghost`: declared to muster `answer`, but `ghost` is not a node of this graph",
                "`planner`: declared to muster `phantom`, which is not a node of this graph",
                "`planner`: declared to muster `summarize`, which is not a worker template (declare it with `add_worker_template`)",
                "`answer`: declared to muster `answer`, but `answer` is a worker template, whose tasks may only contribute a delta and cannot muster",
                "`planner`: declares its muster of `answer` twice",
            ]
        );
    }

    #[test]
    fn declared_musters_are_part_of_the_fingerprint_in_any_order() {
        let bare = graph().fingerprint();
        let mut one = graph();
        one.declare_muster("planner", "answer");
        assert_ne!(one.fingerprint(), bare);
        let mut g = graph();
        g.add_worker_template("judge", NodeSpec::noop())
            .declare_muster("planner", "judge")
            .declare_muster("planner", "answer");
        let mut h = graph();
        h.add_worker_template("judge", NodeSpec::noop())
            .declare_muster("planner", "answer")
            .declare_muster("planner", "judge");
        assert_eq!(g.fingerprint(), h.fingerprint());
    }

    #[test]
    fn mermaid_draws_each_declared_muster_as_a_dashed_edge() {
        let plain = graph().to_mermaid();
        assert!(!plain.contains("muster"), "{plain}");
        let mut g = graph();
        g.declare_muster("planner", "answer");
        let m = g.to_mermaid();
        // planner is n0, answer n1: the fan-out goes from one to the other.
        assert!(m.contains("    n0 -.->|muster| n1\n"), "{m}");
        assert_eq!(m.lines().count(), plain.lines().count() + 1, "{m}");
    }

    #[test]
    fn only_a_graph_that_declares_musters_constrains_them() {
        let (planner, answer, other) = (
            NodeId::new("planner"),
            NodeId::new("answer"),
            NodeId::new("summarize"),
        );
        let mut g = graph();
        assert!(g.muster_allowed(&other, &answer), "nothing declared");
        g.declare_muster("planner", "answer");
        assert!(g.muster_allowed(&planner, &answer));
        assert!(!g.muster_allowed(&other, &answer));
    }
}
