//! Helpers shared by the durable-store tests: temporary folders, PostgreSQL schemas, a counting graph.

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::prelude::*;
use futures::future::BoxFuture;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory under the target dir, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn db(&self) -> PathBuf {
        self.0.join("waypoints.sqlite")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The PostgreSQL test server (`AEGIS_TEST_POSTGRES_URL` overrides it).
pub(crate) fn pg_url() -> String {
    std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
}

/// A schema name no other test uses.
pub(crate) fn unique_schema(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name: String = name.chars().take(24).collect();
    format!(
        "aegis_it_{name}_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store in a fresh schema of the test server. An unreachable server
/// fails the test with a message saying so: these tests never skip.
#[cfg(feature = "postgres")]
pub(crate) async fn pg_store(schema: &str) -> aegis::waypoint::PostgresWaypointStore {
    aegis::waypoint::PostgresWaypointStore::connect_with(
        &pg_url(),
        aegis::waypoint::PostgresOptions::default().with_schema(schema),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "the PostgreSQL test server at `{}` is unreachable or refused the store: {e}. \
             Start PostgreSQL (database `test`, user `postgres`) or set AEGIS_TEST_POSTGRES_URL.",
            pg_url()
        )
    })
}

/// Drops a test schema (best effort: a leftover schema harms no other test).
#[cfg(feature = "postgres")]
pub(crate) async fn drop_pg_schema(schema: &str) {
    let Ok((client, connection)) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls).await
    else {
        return;
    };
    let driver = tokio::spawn(connection);
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await;
    drop(client);
    let _ = driver.await;
}

/// What the counting node calls on every execution, with the superstep.
pub(crate) type Hook = Arc<dyn Fn(u32) -> BoxFuture<'static, ()> + Send + Sync>;

pub(crate) fn no_hook() -> Hook {
    Arc::new(|_| Box::pin(async {}))
}

/// Appends its superstep to `log`, adds 1 to `count`, and loops to itself
/// until superstep `last`.
struct Tick {
    last: u32,
    hook: Hook,
}

#[async_trait]
impl StateNode for Tick {
    async fn run(
        &self,
        _state: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        let step = ctx.superstep();
        (self.hook)(step).await;
        let mut delta = StateDelta::new();
        delta.set("log", step)?.set("count", 1)?;
        Ok(if step >= self.last {
            Directive::end(delta)
        } else {
            delta.into()
        })
    }

    fn kind_name(&self) -> &str {
        "tick"
    }
}

/// A graph of `supersteps` supersteps of one looping node.
pub(crate) fn counting_graph(supersteps: u32, hook: Hook) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            FieldName::new("log").unwrap(),
            DispatchRule::Append,
            None,
            false,
        ),
        FieldSpec::new(
            FieldName::new("count").unwrap(),
            DispatchRule::Sum,
            None,
            false,
        ),
    ]);
    let limits = EngineLimits::default()
        .with_max_supersteps(supersteps + 10)
        .with_max_node_visits(supersteps + 10);
    let mut graph = WarGraph::new(schema, limits);
    graph.add_node(
        "tick",
        NodeSpec::function(Tick {
            last: supersteps,
            hook,
        }),
    );
    graph.add_edge(START, "tick").add_edge("tick", "tick");
    graph
}
