//! Migrations: how a graph takes over threads written by an earlier graph
//! whose change is not compatible on its own — a waiting node renamed or
//! replaced, a field renamed, a dispatch rule changed — by mapping the
//! thread's pending nodes and rewriting its stored state.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::WarGraph;
use crate::canon::{Canon, hex};
use crate::error::MigrationError;
use crate::id::NodeId;

/// The function a migration applies to a thread's stored state.
type MigrateFn = dyn Fn(Value) -> Result<Value, MigrationError> + Send + Sync;

/// How threads written by the graph with one fingerprint continue on this
/// graph: a node map (each pending reference to an old node becomes a
/// reference to its new node) and an optional rewrite of the stored state.
///
/// Registered with [`WarGraph::with_migration`]. On `resume`, the migration
/// registered for the thread's fingerprint runs first: the node map renames
/// the nodes the thread is about to run (its pending vanguard, the
/// unfinished part of an interrupted superstep, the nodes awaiting a parley
/// answer, a `Goto` or `Muster` already decided) and its visit counts; then
/// the node checks run against the mapped names, so a waiting node renamed
/// from `review` to `approve` continues as `approve`. A mapped node may
/// change kind (the migration says it replaces the old one); a node it
/// musters tasks for must still be a worker template. The state rewrite, when
/// given, replaces the field checks (its result must fit this schema); without
/// one, the field checks of a compatible change apply.
///
/// The name identifies the migration in each waypoint written after it ran
/// ([`PreviousGraph::migration`](crate::waypoint::PreviousGraph::migration)), in a
/// worker fleet's run status and in the verdicts workers record: give a
/// migration a new name when you change what it does, so workers that
/// already judged a thread judge it again.
///
/// ```
/// use aegis_runtime::graph::{EngineLimits, Migration, WarGraph};
/// use aegis_runtime::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec};
/// use serde_json::{Value, json};
///
/// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
///     FieldName::new("notes")?, DispatchRule::Append, None, false,
/// )]);
/// let mut graph = WarGraph::new(schema, EngineLimits::default());
/// // The previous version called its waiting node `review` and kept one
/// // `note` string.
/// graph.with_migration(
///     Migration::new("review-becomes-approve", "v7:0123")
///         .map_node("review", "approve")
///         .with_state(|mut state: Value| {
///             let note = state.as_object_mut().and_then(|s| s.remove("note"));
///             state["notes"] = json!(note.into_iter().collect::<Vec<_>>());
///             Ok(state)
///         }),
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Migration {
    name: String,
    from: String,
    nodes: Vec<(NodeId, NodeId)>,
    state: Option<Arc<MigrateFn>>,
}

impl Migration {
    /// A migration named `name` for threads written by the graph whose
    /// fingerprint is `from_fingerprint` (what `WarGraph::fingerprint`
    /// returned for it, what its waypoints record, and what a
    /// `GraphMismatch` and a pinned run name). It maps no node and keeps
    /// the state until [`Migration::map_node`] and
    /// [`Migration::with_state`] say otherwise.
    pub fn new(name: impl Into<String>, from_fingerprint: impl Into<String>) -> Self {
        Migration {
            name: name.into(),
            from: from_fingerprint.into(),
            nodes: Vec::new(),
            state: None,
        }
    }

    /// Threads that would run `old` run `new` instead: a renamed node, or
    /// a node replaced by another. Mapping `old` again replaces the earlier
    /// mapping.
    #[must_use]
    pub fn map_node(mut self, old: impl Into<NodeId>, new: impl Into<NodeId>) -> Self {
        let old = old.into();
        self.nodes.retain(|(from, _)| *from != old);
        self.nodes.push((old, new.into()));
        self
    }

    /// Rewrites the stored state: `migrate` gets it as a JSON object of
    /// field values and returns the state for this graph (only declared
    /// fields, each of the type its dispatch rule needs; a field left unset
    /// gets its default). An `Err` refuses the thread with
    /// [`Incompatibility::MigrationFailed`](crate::error::Incompatibility::MigrationFailed).
    #[must_use]
    pub fn with_state<F>(mut self, migrate: F) -> Self
    where
        F: Fn(Value) -> Result<Value, MigrationError> + Send + Sync + 'static,
    {
        self.state = Some(Arc::new(migrate));
        self
    }

    /// The migration's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fingerprint of the graph whose threads it carries over.
    pub fn from_fingerprint(&self) -> &str {
        &self.from
    }

    /// The node map, `(old, new)`, in the order given.
    pub fn mapped_nodes(&self) -> &[(NodeId, NodeId)] {
        &self.nodes
    }

    /// The node `node` of the old graph runs as on this one.
    pub(crate) fn map<'a>(&'a self, node: &'a NodeId) -> &'a NodeId {
        self.nodes
            .iter()
            .find(|(old, _)| old == node)
            .map_or(node, |(_, new)| new)
    }

    /// The state rewrite, when the migration has one.
    pub(crate) fn state_rewrite(&self) -> Option<&MigrateFn> {
        self.state.as_deref()
    }
}

impl fmt::Debug for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Migration")
            .field("name", &self.name)
            .field("from", &self.from)
            .field("nodes", &self.nodes)
            .field("rewrites_state", &self.state.is_some())
            .finish()
    }
}

impl WarGraph {
    /// Lets `resume` continue threads written by the graph whose
    /// fingerprint is `migration`'s [`Migration::from_fingerprint`]: see
    /// [`Migration`] for what it maps and rewrites, and in which order the
    /// checks run.
    ///
    /// Waypoints written afterwards record both fingerprints and the
    /// migration's name ([`Waypoint::previous_graph`](crate::waypoint::Waypoint::previous_graph)).
    /// Registering a second migration from the same fingerprint replaces
    /// the first. Migrations are not part of the fingerprint; a worker
    /// fleet tells graphs with different migrations apart by a digest of
    /// them, which each worker registers with its graphs.
    pub fn with_migration(&mut self, migration: Migration) -> &mut Self {
        self.migrations.retain(|m| m.from != migration.from);
        self.migrations.push(migration);
        self
    }

    /// The migration registered for threads written by `fingerprint`.
    pub(crate) fn migration_from(&self, fingerprint: &str) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.from == fingerprint)
    }

    /// A digest of the registered migrations (each one's source
    /// fingerprint, name and node map, and whether it rewrites the state);
    /// empty when there are none. Two workers whose graphs share a
    /// fingerprint but not their migrations may judge a waiting thread
    /// differently, so a fleet keys its verdicts by both.
    pub(crate) fn migrations_digest(&self) -> String {
        if self.migrations.is_empty() {
            return String::new();
        }
        let mut ms: Vec<&Migration> = self.migrations.iter().collect();
        ms.sort_by(|a, b| a.from.cmp(&b.from));
        let mut c = Canon::new("aegis-migrations");
        c.count(ms.len());
        for m in ms {
            c.str(&m.from)
                .str(&m.name)
                .bool(m.state.is_some())
                .count(m.nodes.len());
            for (old, new) in &m.nodes {
                c.str(old.as_str()).str(new.as_str());
            }
        }
        format!("m:{}", hex(&c.digest()[..8]))
    }
}
