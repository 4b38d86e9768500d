//! Fail-closed structural and policy validation, listing every offender.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{NodeKind, NodeSpec, WarGraph};
use crate::error::{EdgeRef, EngineError, PolicyOffender};
use crate::id::{END, NodeId, START};
use crate::policy::{Aegis, ErrorHandlerSpec, retry_problems, timeout_problems};
use crate::state::DispatchRule;

impl WarGraph {
    /// Checks the graph before any node runs and reports every problem found,
    /// each kind of problem listing all of its offenders.
    ///
    /// Checks that need the engine (registered predicates, handlers and
    /// evaluators, a cache backend) run again in `WarEngine::start`/`resume`.
    pub fn validate(&self) -> Result<(), EngineError> {
        EngineError::from_problems(self.problems())
    }

    /// Every problem the graph's own checks find (memoised until the graph
    /// changes).
    pub(crate) fn problems(&self) -> Vec<EngineError> {
        self.memo.problems.get_or_init(|| self.check()).clone()
    }

    pub(super) fn check(&self) -> Vec<EngineError> {
        let mut errors = Vec::new();
        let declared: BTreeSet<&NodeId> = self.nodes.iter().map(|(id, _)| id).collect();

        let mut seen = BTreeSet::new();
        let dups: BTreeSet<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, _)| !seen.insert(id))
            .map(|(id, _)| id.clone())
            .collect();
        if !dups.is_empty() {
            errors.push(EngineError::DuplicateNodeId {
                nodes: dups.into_iter().collect(),
            });
        }
        let reserved: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, _)| id.is_virtual() || id.as_str().is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        if !reserved.is_empty() {
            errors.push(EngineError::ReservedNodeId { nodes: reserved });
        }
        let dup_fields = self.schema.duplicate_names();
        if !dup_fields.is_empty() {
            errors.push(EngineError::DuplicateField { fields: dup_fields });
        }

        // Edge endpoints: START may only be a source, END only a target.
        let is_source = |n: &NodeId| n.as_str() == START || declared.contains(n);
        let is_target = |n: &NodeId| n.as_str() == END || declared.contains(n);
        let mut bad_edges: Vec<EdgeRef> = self
            .edges
            .iter()
            .filter(|(a, b)| !is_source(a) || !is_target(b))
            .map(|(a, b)| EdgeRef {
                from: a.clone(),
                to: b.clone(),
            })
            .collect();
        for c in &self.conditional {
            for t in &c.targets {
                if !declared.contains(&c.from) || !is_target(t) {
                    bad_edges.push(EdgeRef {
                        from: c.from.clone(),
                        to: t.clone(),
                    });
                }
            }
        }
        // A gate's approve and reject targets are edges too.
        for (id, spec) in &self.nodes {
            if let NodeSpec::Gate {
                approve, reject, ..
            } = spec
            {
                for t in [approve, reject] {
                    if !is_target(t) {
                        bad_edges.push(EdgeRef {
                            from: id.clone(),
                            to: t.clone(),
                        });
                    }
                }
            }
        }
        let into_templates: BTreeSet<NodeId> = self
            .edges
            .iter()
            .map(|(_, b)| b)
            .chain(self.conditional.iter().flat_map(|c| c.targets.iter()))
            .filter(|t| self.worker_templates.contains(*t))
            .cloned()
            .collect();
        if !into_templates.is_empty() {
            errors.push(EngineError::WorkerTemplateHasIncomingEdges {
                nodes: into_templates.into_iter().collect(),
            });
        }
        if !bad_edges.is_empty() {
            bad_edges.sort();
            bad_edges.dedup();
            errors.push(EngineError::UnknownEdgeEndpoint { edges: bad_edges });
        }
        let unknown_dynamic: Vec<NodeId> = self
            .dynamic_targets
            .iter()
            .filter(|n| !declared.contains(n))
            .cloned()
            .collect();
        if !unknown_dynamic.is_empty() {
            errors.push(EngineError::UnknownDynamicTarget {
                nodes: unknown_dynamic,
            });
        }

        if !self.edges.iter().any(|(a, _)| a.as_str() == START) {
            errors.push(EngineError::NoEntryPoint);
        } else {
            let reachable = self.reachable();
            let unreachable: Vec<NodeId> = declared
                .iter()
                .filter(|n| !reachable.contains(**n))
                .map(|n| (*n).clone())
                .collect();
            if !unreachable.is_empty() {
                errors.push(EngineError::UnreachableNodes { nodes: unreachable });
            }
        }

        errors.extend(self.battalion_problems());

        let paladin = self.paladin_problems();
        if !paladin.is_empty() {
            errors.push(EngineError::PaladinFieldUndeclared { offenders: paladin });
        }
        errors.extend(super::task_input::task_input_problems(self));
        errors.extend(super::muster_rules::muster_problems(self));
        let no_model = self.paladins_without_model();
        if !no_model.is_empty() {
            errors.push(EngineError::PaladinWithoutModel { nodes: no_model });
        }

        errors.extend(self.aegis_problems(&declared));
        errors.extend(super::cache_rules::cache_problems(self));
        errors
    }

    /// Every node reachable from START through static and conditional edges
    /// and error routes; dynamic targets count as reachable (any node may
    /// `Goto` them), and so do Route targets (eligible by declaration).
    pub(crate) fn reachable(&self) -> BTreeSet<NodeId> {
        let mut succ: BTreeMap<&NodeId, Vec<&NodeId>> = BTreeMap::new();
        for (a, b) in &self.edges {
            succ.entry(a).or_default().push(b);
        }
        for (id, spec) in &self.nodes {
            if let Some(ErrorHandlerSpec::Route { to, .. }) =
                self.aegis_for(id).and_then(|a| a.on_error.as_ref())
            {
                succ.entry(id).or_default().push(to);
            }
            if let NodeSpec::Gate {
                approve, reject, ..
            } = spec
            {
                succ.entry(id).or_default().extend([approve, reject]);
            }
        }
        for c in &self.conditional {
            succ.entry(&c.from).or_default().extend(c.targets.iter());
        }
        let mut seen: BTreeSet<NodeId> = BTreeSet::new();
        let start = NodeId::new(START);
        let mut queue: VecDeque<&NodeId> = VecDeque::from([&start]);
        queue.extend(self.dynamic_targets.iter());
        // Worker templates run when something musters them.
        queue.extend(self.worker_templates.iter());
        while let Some(n) = queue.pop_front() {
            if !seen.insert(n.clone()) {
                continue;
            }
            if let Some(next) = succ.get(n) {
                queue.extend(next.iter().copied());
            }
        }
        seen
    }

    fn paladin_problems(&self) -> Vec<PolicyOffender> {
        let mut out = Vec::new();
        for (id, spec) in &self.nodes {
            if let NodeSpec::Paladin {
                input,
                output_field,
                ..
            } = spec
            {
                if self.schema.field(output_field.as_str()).is_none() {
                    out.push(PolicyOffender::new(
                        Some(id),
                        format!("output field `{output_field}` is not declared"),
                    ));
                }
                match input.fields() {
                    Ok(fields) => {
                        for f in fields {
                            if self.schema.field(&f).is_none() {
                                out.push(PolicyOffender::new(
                                    Some(id),
                                    format!("input template names undeclared field `{f}`"),
                                ));
                            }
                        }
                    }
                    Err(e) => out.push(PolicyOffender::new(Some(id), e.to_string())),
                }
            }
        }
        out
    }

    /// The service refuses a blank model at every attempt, so a Paladin
    /// built without `with_model` can never succeed: say so before any node
    /// runs. (A Battalion's child reports its own through
    /// `BattalionChildInvalid`.)
    fn paladins_without_model(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, spec)| {
                matches!(spec, NodeSpec::Paladin { paladin, .. } if paladin.model.trim().is_empty())
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn aegis_problems(&self, declared: &BTreeSet<&NodeId>) -> Vec<EngineError> {
        let mut errors = Vec::new();
        let undeclared: Vec<NodeId> = self
            .aegis
            .keys()
            .filter(|n| !declared.contains(n))
            .cloned()
            .collect();
        if !undeclared.is_empty() {
            errors.push(EngineError::AegisOnUndeclaredNode { nodes: undeclared });
        }

        // Each Aegis value is checked once: the default under `None`, own
        // entries under their node.
        let entries: Vec<(Option<&NodeId>, &Aegis)> = self.aegis_entries().collect();
        let mut retry = Vec::new();
        let mut timeout = Vec::new();
        for (node, aegis) in &entries {
            if let Some(p) = &aegis.retry {
                retry.extend(
                    retry_problems(p)
                        .into_iter()
                        .map(|r| PolicyOffender::new(*node, r)),
                );
            }
            if let Some(p) = &aegis.timeout {
                timeout.extend(
                    timeout_problems(p)
                        .into_iter()
                        .map(|r| PolicyOffender::new(*node, r)),
                );
            }
        }
        if !retry.is_empty() {
            errors.push(EngineError::RetryPolicyInvalid { offenders: retry });
        }
        if !timeout.is_empty() {
            errors.push(EngineError::TimeoutPolicyInvalid { offenders: timeout });
        }

        errors.extend(self.handler_problems(&entries, declared));

        // The support matrix applies to the policy each node actually gets.
        let mut unsupported = Vec::new();
        for (id, spec) in &self.nodes {
            if let Some(aegis) = self.aegis_for(id) {
                for part in unsupported_parts(spec.kind(), aegis) {
                    unsupported.push(PolicyOffender::new(
                        Some(id),
                        format!("{part} is not supported on a {} node", spec.kind()),
                    ));
                }
            }
        }
        if !unsupported.is_empty() {
            errors.push(EngineError::AegisUnsupportedForNodeKind {
                offenders: unsupported,
            });
        }
        errors
    }
}

impl WarGraph {
    /// Route and Absorb wiring: targets, error fields, fallback deltas.
    fn handler_problems(
        &self,
        entries: &[(Option<&NodeId>, &Aegis)],
        declared: &BTreeSet<&NodeId>,
    ) -> Vec<EngineError> {
        let (mut unknown, mut undeclared, mut summed, mut absorb) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (node, aegis) in entries {
            match &aegis.on_error {
                Some(ErrorHandlerSpec::Route { to, error_field }) => {
                    if !declared.contains(to) {
                        unknown.push(PolicyOffender::new(
                            *node,
                            format!("routes to undeclared node `{to}`"),
                        ));
                    }
                    match self.schema.field(error_field.as_str()) {
                        None => undeclared.push(PolicyOffender::new(
                            *node,
                            format!("error field `{error_field}` is not declared"),
                        )),
                        Some(f) if f.dispatch == DispatchRule::Sum => summed.push(PolicyOffender::new(
                            *node,
                            format!("error field `{error_field}` is Sum; use LastWrite, Append or Merge"),
                        )),
                        Some(_) => {}
                    }
                }
                Some(ErrorHandlerSpec::Absorb { fallback_delta }) => {
                    for (field, value) in fallback_delta.iter() {
                        let problem = match self.schema.field(field.as_str()) {
                            None => Some(format!("writes undeclared field `{field}`")),
                            Some(f) if f.dispatch == DispatchRule::Sum && !value.is_number() => {
                                Some(format!("writes a non-number to Sum field `{field}`"))
                            }
                            Some(f) if f.dispatch == DispatchRule::Merge && !value.is_object() => {
                                Some(format!("writes a non-object to Merge field `{field}`"))
                            }
                            Some(_) => None,
                        };
                        if let Some(p) = problem {
                            absorb.push(PolicyOffender::new(*node, p));
                        }
                    }
                }
                _ => {}
            }
        }
        let mut to_template = Vec::new();
        for (node, aegis) in entries {
            if let Some(ErrorHandlerSpec::Route { to, .. }) = &aegis.on_error
                && self.worker_templates.contains(to)
            {
                to_template.push(PolicyOffender::new(
                    *node,
                    format!("routes to worker template `{to}`"),
                ));
            }
        }
        let on_template: Vec<PolicyOffender> = self
            .worker_templates
            .iter()
            .filter(|t| {
                matches!(
                    self.aegis_for(t).and_then(|a| a.on_error.as_ref()),
                    Some(ErrorHandlerSpec::Route { .. })
                )
            })
            .map(|t| {
                PolicyOffender::new(
                    Some(t),
                    "a Route handler on a worker template; a task may only contribute a delta",
                )
            })
            .collect();
        let mut errors = Vec::new();
        if !unknown.is_empty() {
            errors.push(EngineError::RouteTargetUnknown { offenders: unknown });
        }
        if !to_template.is_empty() {
            errors.push(EngineError::RouteTargetIsWorkerTemplate {
                offenders: to_template,
            });
        }
        if !on_template.is_empty() {
            errors.push(EngineError::HandlerNotAllowedOnWorkerTemplate {
                offenders: on_template,
            });
        }
        if !undeclared.is_empty() {
            errors.push(EngineError::RouteErrorFieldUndeclared {
                offenders: undeclared,
            });
        }
        if !summed.is_empty() {
            errors.push(EngineError::RouteErrorFieldDispatchInvalid { offenders: summed });
        }
        if !absorb.is_empty() {
            errors.push(EngineError::AbsorbDeltaSchemaInvalid { offenders: absorb });
        }
        errors
    }
}

impl WarGraph {
    /// Battalion children validate on their own; their mappings name
    /// declared fields on each side.
    fn battalion_problems(&self) -> Vec<EngineError> {
        let mut errors = Vec::new();
        let mut mapping = Vec::new();
        for (id, spec) in &self.nodes {
            let NodeSpec::Battalion {
                child,
                inputs,
                outputs,
            } = spec
            else {
                continue;
            };
            if let Err(error) = child.validate() {
                errors.push(EngineError::BattalionChildInvalid {
                    node: id.clone(),
                    error: Box::new(error),
                });
            }
            let sides = inputs
                .iter()
                .map(|(p, c)| (p, c, "input"))
                .chain(outputs.iter().map(|(c, p)| (p, c, "output")));
            for (parent, child_field, side) in sides {
                if self.schema.field(parent.as_str()).is_none() {
                    mapping.push(PolicyOffender::new(
                        Some(id),
                        format!("{side} mapping names `{parent}`, not a field of this graph"),
                    ));
                }
                if child.schema.field(child_field.as_str()).is_none() {
                    mapping.push(PolicyOffender::new(
                        Some(id),
                        format!("{side} mapping names `{child_field}`, not a field of the child"),
                    ));
                }
            }
        }
        if !mapping.is_empty() {
            errors.push(EngineError::BattalionMappingInvalid { offenders: mapping });
        }
        errors
    }
}

/// The node-kind support matrix: which parts of an Aegis a kind rejects.
fn unsupported_parts(kind: NodeKind, aegis: &Aegis) -> Vec<&'static str> {
    let mut parts = Vec::new();
    match kind {
        // Function and Paladin nodes support every part of an Aegis.
        NodeKind::Function | NodeKind::Paladin => {}
        // A child run is the attempt unit: a timeout cancels it and a handler
        // compensates it, but child waypoints are durable, so retrying or
        // replaying it from a cache has no sound meaning yet.
        NodeKind::Battalion => {
            if aegis.retry.is_some() {
                parts.push("retry");
            }
            if aegis.cache.is_some() {
                parts.push("cache");
            }
        }
        // A gate has no attempt to retry, time or cache; its expiry is the
        // parley's `on_expire`.
        NodeKind::Gate => {
            if aegis.retry.is_some() {
                parts.push("retry");
            }
            if aegis.timeout.is_some() {
                parts.push("timeout");
            }
            if aegis.on_error.is_some() {
                parts.push("on_error");
            }
            if aegis.cache.is_some() {
                parts.push("cache");
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::EngineLimits;
    use crate::graph::InputMapping;
    use crate::graph::Paladin;
    use crate::state::{BattlefieldSchema, FieldName, FieldSpec};

    fn field(name: &str) -> FieldName {
        FieldName::new(name).unwrap()
    }

    fn agent(paladin: Paladin) -> NodeSpec {
        NodeSpec::paladin(
            paladin,
            InputMapping::new("Answer: {question}"),
            field("answer"),
        )
    }

    fn graph() -> WarGraph {
        let schema = BattlefieldSchema::new(vec![
            FieldSpec::new(field("question"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(field("answer"), DispatchRule::LastWrite, None, false),
        ]);
        WarGraph::new(schema, EngineLimits::default())
    }

    #[test]
    fn a_paladin_with_a_model_validates() {
        let mut g = graph();
        g.add_node("answerer", agent(Paladin::new("A").with_model("m")))
            .add_edge(START, "answerer")
            .add_edge("answerer", END);
        assert_eq!(g.validate(), Ok(()));
    }

    #[test]
    fn every_paladin_without_a_model_is_listed_with_every_other_offender() {
        let mut g = graph();
        g.add_node("ok", agent(Paladin::new("A").with_model("m")))
            .add_node("unset", agent(Paladin::new("B")))
            .add_node("blank", agent(Paladin::new("C").with_model("  ")))
            .add_worker_template("scorer", agent(Paladin::new("D")))
            .add_edge(START, "ok")
            .add_edge("ok", "unset")
            .add_edge("unset", "blank")
            .add_edge("blank", "ghost");
        let err = g.validate().unwrap_err();
        let all = err.validation_errors();
        assert!(
            all.contains(&&EngineError::PaladinWithoutModel {
                nodes: vec![
                    NodeId::new("unset"),
                    NodeId::new("blank"),
                    NodeId::new("scorer"),
                ],
            }),
            "{err}"
        );
        assert!(
            all.iter()
                .any(|e| matches!(e, EngineError::UnknownEdgeEndpoint { .. })),
            "the other offender is reported in the same error: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("paladin nodes with no model (set one with `Paladin::with_model`): `unset`, `blank`, `scorer`"),
            "{text}"
        );
    }

    #[test]
    fn a_paladin_without_a_model_inside_a_battalion_child_is_reported() {
        let mut child = graph();
        child
            .add_node("inner", agent(Paladin::new("Inner")))
            .add_edge(START, "inner")
            .add_edge("inner", END);
        let mut g = graph();
        g.add_node(
            "sub",
            NodeSpec::battalion(
                child,
                vec![(field("question"), field("question"))],
                vec![(field("answer"), field("answer"))],
            ),
        )
        .add_edge(START, "sub")
        .add_edge("sub", END);
        match g.validate() {
            Err(EngineError::BattalionChildInvalid { node, error }) => {
                assert_eq!(node, NodeId::new("sub"));
                assert_eq!(
                    *error,
                    EngineError::PaladinWithoutModel {
                        nodes: vec![NodeId::new("inner")]
                    }
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
