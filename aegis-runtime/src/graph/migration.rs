//! Migrations: how a graph takes over threads written by an earlier graph
//! whose change is not compatible on its own (a field renamed, a dispatch
//! rule changed), by rewriting the stored state.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::WarGraph;
use crate::error::MigrationError;

/// The function a migration applies to a thread's stored state.
type MigrateFn = dyn Fn(Value) -> Result<Value, MigrationError> + Send + Sync;

/// A state rewrite for threads written by the graph with fingerprint `from`.
#[derive(Clone)]
pub(crate) struct Migration {
    pub(crate) from: String,
    pub(crate) apply: Arc<MigrateFn>,
}

impl fmt::Debug for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Migration")
            .field("from", &self.from)
            .finish()
    }
}

impl WarGraph {
    /// Lets `resume` continue threads written by the graph whose fingerprint
    /// is `from_fingerprint` (what `WarGraph::fingerprint` returned for it,
    /// and what its waypoints record): `migrate` gets the stored state as a
    /// JSON object of field values and returns the state for this graph.
    ///
    /// A migration replaces the field checks of a compatible resume (the
    /// returned state must fit this schema: only declared fields, each of
    /// the type its dispatch rule needs, required fields set; a field left
    /// unset gets its default); the node checks still apply, since a state
    /// rewrite cannot bring back a node the thread is waiting in. Waypoints
    /// written afterwards record both fingerprints
    /// ([`Waypoint::previous_graph`](crate::Waypoint::previous_graph)).
    ///
    /// Registering a second migration from the same fingerprint replaces the
    /// first. Migrations are not part of the fingerprint.
    ///
    /// ```
    /// use aegis_runtime::*;
    /// use serde_json::{Value, json};
    ///
    /// let schema = BattlefieldSchema::new(vec![FieldSpec::new(
    ///     FieldName::new("notes")?, DispatchRule::Append, None, false,
    /// )]);
    /// let mut graph = WarGraph::new(schema, EngineLimits::default());
    /// // The previous version kept one `note` string.
    /// graph.with_migration("v7:0123", |mut state: Value| {
    ///     let note = state.as_object_mut().and_then(|s| s.remove("note"));
    ///     state["notes"] = json!(note.into_iter().collect::<Vec<_>>());
    ///     Ok(state)
    /// });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_migration<F>(
        &mut self,
        from_fingerprint: impl Into<String>,
        migrate: F,
    ) -> &mut Self
    where
        F: Fn(Value) -> Result<Value, MigrationError> + Send + Sync + 'static,
    {
        let from = from_fingerprint.into();
        self.migrations.retain(|m| m.from != from);
        self.migrations.push(Migration {
            from,
            apply: Arc::new(migrate),
        });
        self
    }

    /// The migration registered for threads written by `fingerprint`.
    pub(crate) fn migration_from(&self, fingerprint: &str) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.from == fingerprint)
    }
}
