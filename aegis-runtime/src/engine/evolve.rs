//! Resuming a thread on a changed graph: whether the change is compatible
//! with where the thread waits, and carrying the thread over if it is.
//!
//! Compatible means: every node the thread is about to run still exists
//! with the same kind (and a node it mustered tasks for is still a worker
//! template); every field the stored state holds is still declared with the
//! same dispatch rule; every new field has a default or is optional. Edges,
//! new nodes and policies may change freely. A migration registered for the
//! thread's fingerprint first maps the thread's pending nodes (the node
//! checks then see the new names, and a mapped node may change kind), and
//! its state rewrite, when it has one, replaces the field checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{EngineError, Incompatibility};
use crate::graph::{GraphManifest, Migration, NextStep, WarGraph};
use crate::id::NodeId;
use crate::state::{Battlefield, DispatchRule, initial_state};
use crate::waypoint::{Activation, CompletedActivation, PreviousGraph, Waypoint, WaypointStatus};
use serde_json::Value;

/// `latest` carried onto `graph`: unchanged when `graph` is the graph that
/// wrote it; otherwise mapped and checked, migrated or given new fields'
/// defaults, and marked with the graph it came from. `GraphMismatch` when
/// it cannot go on.
///
/// Pure: it reads nothing and writes nothing, so a worker fleet also uses
/// it to judge whether its graph can continue a thread another graph wrote.
pub(crate) fn onto(graph: &WarGraph, mut latest: Waypoint) -> Result<Waypoint, EngineError> {
    let found = graph.fingerprint();
    if latest.fingerprint == found {
        return Ok(latest);
    }
    let new = graph.manifest();
    let old = latest.manifest.clone();
    let old = old.as_deref();
    let migration = graph.migration_from(&latest.fingerprint);
    let mapped = match migration {
        Some(m) if !m.mapped_nodes().is_empty() => map_nodes(&mut latest, m),
        _ => Vec::new(),
    };
    let mut reasons = node_reasons(&latest, old, &new, &mapped);
    let state = if !reasons.is_empty() {
        None
    } else if let Some(rewrite) = migration.and_then(Migration::state_rewrite) {
        // The node checks passed; the migration answers for the fields.
        match rewrite(latest.state.to_json()) {
            Err(e) => {
                reasons.push(Incompatibility::MigrationFailed { message: e.message });
                None
            }
            Ok(value) => match initial_state(&graph.schema, &with_defaults(value, graph, |_| true))
            {
                Ok(state) => Some(state),
                Err(e) => {
                    reasons.push(Incompatibility::StateDoesNotFit {
                        message: e.to_string(),
                    });
                    None
                }
            },
        }
    } else {
        reasons.extend(field_reasons(&latest.state, old, graph));
        if reasons.is_empty() {
            match with_new_defaults(&latest.state, old, graph) {
                Ok(state) => Some(state),
                Err(message) => {
                    reasons.push(Incompatibility::StateDoesNotFit { message });
                    None
                }
            }
        } else {
            None
        }
    };
    let Some(state) = state else {
        return Err(EngineError::GraphMismatch {
            changes: old.map(|o| o.changes_to(&new)).unwrap_or_default(),
            expected: latest.fingerprint.to_string(),
            found,
            reasons,
        });
    };
    latest.state = state;
    let from = std::mem::replace(&mut latest.fingerprint, found.into()).to_string();
    let moved = PreviousGraph::new(from);
    latest.previous_graph = Some(Arc::new(match migration {
        Some(m) => moved.with_migration(m.name(), mapped),
        None => moved,
    }));
    latest.manifest = Some(Arc::new(new));
    Ok(latest)
}

/// Renames, in `w`, every node the thread is about to run that `m` maps:
/// the pending vanguard, the finished part of an interrupted superstep and
/// the jumps it decided, the parley on its way and the questions awaiting
/// an answer, and the visit counts (so a renamed node keeps its visits
/// towards `max_node_visits`). Records stay as they were: they tell what
/// ran, under the name it ran as. Returns the mappings that applied.
fn map_nodes(w: &mut Waypoint, m: &Migration) -> Vec<(NodeId, NodeId)> {
    let mut applied: Vec<(NodeId, NodeId)> = Vec::new();
    let mut map = |node: &mut NodeId| {
        let new = m.map(node);
        if new != node {
            let pair = (node.clone(), new.clone());
            if !applied.contains(&pair) {
                applied.push(pair);
            }
            *node = new.clone();
        }
    };
    let mut vanguard: Vec<Activation> = w.vanguard.to_vec();
    vanguard.iter_mut().for_each(|a| map(&mut a.node_id));
    // Vanguard order is by node id: a new name may sort elsewhere.
    vanguard.sort();
    w.vanguard = vanguard.into();
    if w.completed().len() > 0 {
        let completed: Vec<CompletedActivation> = w
            .completed()
            .map(|c| {
                let mut c = c.clone();
                map(&mut c.activation.node_id);
                match &mut c.directive.next {
                    NextStep::Goto(target) => map(target),
                    NextStep::Muster { worker, .. } => map(worker),
                    _ => {}
                }
                c
            })
            .collect();
        w.completed = completed
            .into_iter()
            .map(Arc::new)
            .collect::<imbl::Vector<_>>()
            .into();
    }
    if let Some(p) = &w.parley {
        let mut delivery = (**p).clone();
        delivery.nodes.iter_mut().for_each(&mut map);
        w.parley = Some(Arc::new(delivery));
    }
    if let WaypointStatus::AwaitingInput { requests } = &mut w.status {
        requests.iter_mut().for_each(|(node, _)| map(node));
    }
    if w.visits().any(|(node, _)| m.map(node) != node) {
        let mut counts: BTreeMap<NodeId, u32> = BTreeMap::new();
        for (node, n) in w.visits() {
            let c = counts.entry(m.map(node).clone()).or_default();
            *c = c.saturating_add(n);
        }
        w.visits = counts.into_iter().collect();
    }
    applied
}

/// Every node the thread will run, and whether it runs as mustered tasks.
fn pending_nodes(w: &Waypoint) -> BTreeMap<NodeId, bool> {
    let mut nodes: BTreeMap<NodeId, bool> = BTreeMap::new();
    let mut add = |node: &NodeId, mustered: bool| {
        *nodes.entry(node.clone()).or_default() |= mustered;
    };
    for a in w.vanguard.iter() {
        add(&a.node_id, a.task.is_some());
    }
    // An interrupted superstep's finished activations are merged, and
    // routed from, on resume; the jumps they decided are taken.
    for c in w.completed.iter() {
        add(&c.activation.node_id, c.activation.task.is_some());
        match &c.directive.next {
            NextStep::Goto(target) => add(target, false),
            NextStep::Muster { worker, .. } => add(worker, true),
            _ => {}
        }
    }
    if let Some(p) = &w.parley {
        for n in &p.nodes {
            add(n, false);
        }
    }
    if let WaypointStatus::AwaitingInput { requests } = &w.status {
        for (n, _) in requests {
            add(n, false);
        }
    }
    nodes
}

/// Why the nodes the thread is about to run cannot run on `new`. `mapped`
/// lists the nodes a migration renamed, `(old, new)`: a mapped node is
/// checked under its new name, and may have changed kind.
fn node_reasons(
    w: &Waypoint,
    old: Option<&GraphManifest>,
    new: &GraphManifest,
    mapped: &[(NodeId, NodeId)],
) -> Vec<Incompatibility> {
    let mut reasons = Vec::new();
    for (node, mustered) in pending_nodes(w) {
        let from = mapped.iter().find(|(_, to)| *to == node).map(|(f, _)| f);
        let Some(now) = new.nodes.get(&node) else {
            reasons.push(match from {
                Some(from) => Incompatibility::MappedNodeMissing {
                    from: from.clone(),
                    to: node,
                },
                None => Incompatibility::PendingNodeRemoved { node },
            });
            continue;
        };
        // A thread from before manifests shows no kinds: existence is all
        // that can be checked.
        if from.is_none()
            && let Some(was) = old.and_then(|o| o.nodes.get(&node))
            && was.kind != now.kind
        {
            reasons.push(Incompatibility::PendingNodeKindChanged {
                node: node.clone(),
                from: was.kind.clone(),
                to: now.kind.clone(),
            });
        }
        if mustered && !now.worker {
            reasons.push(Incompatibility::WorkerTemplateGone { node });
        }
    }
    reasons
}

/// Whether `field` is new in this graph: absent from the old manifest, or,
/// for a thread from before manifests, from the stored state.
fn is_new(field: &str, state: &Battlefield, old: Option<&GraphManifest>) -> bool {
    match old {
        Some(o) => !o.fields.keys().any(|f| f.as_str() == field),
        None => !state.contains(field),
    }
}

fn field_reasons(
    state: &Battlefield,
    old: Option<&GraphManifest>,
    graph: &WarGraph,
) -> Vec<Incompatibility> {
    let mut reasons = Vec::new();
    for field in state.field_names() {
        let Some(spec) = graph.schema.field(field.as_str()) else {
            reasons.push(Incompatibility::StoredFieldRemoved {
                field: field.clone(),
            });
            continue;
        };
        if let Some(was) = old.and_then(|o| o.fields.get(field))
            && was.dispatch != spec.dispatch
        {
            reasons.push(Incompatibility::StoredFieldDispatchChanged {
                field: field.clone(),
                from: was.dispatch,
                to: spec.dispatch,
            });
        }
    }
    for spec in graph.schema.fields() {
        let name = spec.name.as_str();
        if spec.required
            && spec.default.is_none()
            && !state.contains(name)
            && is_new(name, state, old)
        {
            reasons.push(Incompatibility::NewFieldRequired {
                field: spec.name.clone(),
            });
        }
    }
    reasons
}

/// `state` with every new field's default, as a fresh run would start with
/// it; `state` itself (shared, not copied) when no new field has one.
fn with_new_defaults(
    state: &Battlefield,
    old: Option<&GraphManifest>,
    graph: &WarGraph,
) -> Result<Battlefield, String> {
    let wants = |name: &str| !state.contains(name) && is_new(name, state, old);
    let wants_default = graph.schema.fields().iter().any(|spec| {
        (spec.default.is_some() || spec.dispatch == DispatchRule::Append)
            && wants(spec.name.as_str())
    });
    if !wants_default {
        return Ok(state.clone());
    }
    let value = with_defaults(state.to_json(), graph, wants);
    initial_state(&graph.schema, &value).map_err(|e| e.to_string())
}

/// `state` (a JSON object of field values) with the default of every field
/// it does not set and `wants`. Written out rather than left to
/// `initial_state`, which insists that the input set every required field.
fn with_defaults(mut state: Value, graph: &WarGraph, wants: impl Fn(&str) -> bool) -> Value {
    if let Value::Object(fields) = &mut state {
        for spec in graph.schema.fields() {
            let name = spec.name.as_str();
            if let Some(default) = &spec.default
                && !fields.contains_key(name)
                && wants(name)
            {
                fields.insert(name.to_owned(), default.clone());
            }
        }
    }
    state
}
