//! Deploying a new version: a thread waiting on a parley is resumed on a
//! changed graph. Compatible changes continue, incompatible ones are
//! refused with the reason, a migration carries the rest over; and a thread
//! written by the previous version (a checked-in fixture) resumes on SQLite
//! and PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::stores;

use aegis::engine::CancellationToken;
use aegis::error::GraphChange;
use aegis::error::Incompatibility;
use aegis::error::MigrationError;
use aegis::graph::EngineLimits;
use aegis::graph::Migration;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyRequest;
use aegis::graph::ParleyResponse;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::trace::TraceEvent;
use aegis::trace::TraceSink;
use aegis::waypoint::PreviousGraph;
use aegis::waypoint::SqliteWaypointStore;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn field(name: &str, rule: DispatchRule) -> FieldSpec {
    FieldSpec::new(FieldName::new(name).unwrap(), rule, None, false)
}

/// The first version's schema: the question (required), a log, the answer.
fn fields() -> Vec<FieldSpec> {
    vec![
        FieldSpec::new(
            FieldName::new("question").unwrap(),
            DispatchRule::LastWrite,
            None,
            true,
        ),
        field("log", DispatchRule::Append),
        field("answer", DispatchRule::LastWrite),
    ]
}

fn draft() -> NodeSpec {
    NodeSpec::from_fn("draft", |_, _| {
        Box::pin(async {
            let mut d = StateDelta::new();
            d.set("log", "drafted")?;
            Ok(d.into())
        })
    })
}

/// Asks for approval, then writes the answer (under `kind`).
fn ask(kind: &'static str) -> NodeSpec {
    NodeSpec::from_fn(kind, |_, ctx| {
        Box::pin(async move {
            let Some(response) = ctx.parley_response() else {
                return Ok(Directive::parley(ParleyRequest::new("approve?")));
            };
            let mut d = StateDelta::new();
            d.set("answer", response.value.clone())?;
            Ok(d.into())
        })
    })
}

fn notify() -> NodeSpec {
    NodeSpec::from_fn("notify", |_, _| {
        Box::pin(async {
            let mut d = StateDelta::new();
            d.set("log", "notified")?;
            Ok(d.into())
        })
    })
}

/// `START → draft → ask → END` over `fields`.
fn graph(fields: Vec<FieldSpec>) -> WarGraph {
    let mut g = WarGraph::new(BattlefieldSchema::new(fields), EngineLimits::default());
    g.add_node("draft", draft())
        .add_node("ask", ask("ask"))
        .add_edge(START, "draft")
        .add_edge("draft", "ask")
        .add_edge("ask", END);
    g
}

fn engine(store: &Arc<InMemoryWaypointStore>) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(store.clone())
}

/// A thread of the first version, waiting on `ask`'s parley.
async fn parked() -> (Arc<InMemoryWaypointStore>, String) {
    let store = Arc::new(InMemoryWaypointStore::new());
    let v1 = graph(fields());
    let out = engine(&store)
        .start(&v1, "t", json!({"question": "ship it?"}))
        .await
        .unwrap();
    assert_eq!(out.name(), "AwaitingInput");
    (store, v1.fingerprint())
}

fn yes() -> Option<ParleyResponse> {
    Some(ParleyResponse::new(json!("yes")))
}

/// Resumes `t` on `g`; the run must complete.
async fn completes(store: &Arc<InMemoryWaypointStore>, g: &WarGraph) -> Battlefield {
    let out = engine(store).resume(g, "t", yes()).await.unwrap();
    let RunOutcome::Completed { state, .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!(state.get("answer"), Some(&json!("yes")));
    state
}

/// Resumes `t` on `g`; it must be refused. Returns the reasons and changes.
async fn refused(
    store: &Arc<InMemoryWaypointStore>,
    g: &WarGraph,
) -> (Vec<Incompatibility>, Vec<GraphChange>, String) {
    let err = engine(store).resume(g, "t", yes()).await.unwrap_err();
    let message = err.to_string();
    let EngineError::GraphMismatch {
        reasons, changes, ..
    } = err
    else {
        panic!("{err:?}")
    };
    (reasons, changes, message)
}

fn log(state: &Battlefield) -> Value {
    state.get("log").cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn adding_a_downstream_node_continues_and_records_the_old_graph() {
    let (store, v1) = parked().await;
    let mut v2 = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    v2.add_node("draft", draft())
        .add_node("ask", ask("ask"))
        .add_node("notify", notify())
        .add_edge(START, "draft")
        .add_edge("draft", "ask")
        .add_edge("ask", "notify")
        .add_edge("notify", END);
    assert_ne!(v2.fingerprint(), v1);

    let state = completes(&store, &v2).await;
    assert_eq!(log(&state), json!(["drafted", "notified"]));
    // Every waypoint the resumed run wrote names both graphs.
    let history = store.history("t").await.unwrap();
    let (before, after): (Vec<_>, Vec<_>) = history.iter().partition(|w| w.fingerprint == v1);
    assert!(before.iter().all(|w| w.previous_graph.is_none()));
    assert!(!after.is_empty());
    for w in after {
        assert_eq!(w.fingerprint, v2.fingerprint());
        assert_eq!(
            w.previous_graph.as_deref(),
            Some(&PreviousGraph::new(v1.clone()))
        );
        assert_eq!(w.manifest.as_deref(), Some(&v2.manifest()));
    }
}

#[tokio::test]
async fn retuning_policies_continues() {
    let (store, v1) = parked().await;
    let mut v2 = graph(fields());
    // `on_error` is hashed (it changes what a failure does), retry and
    // timeout are not: both kinds of retune continue.
    v2.set_aegis(
        "draft",
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_on_error(ErrorHandlerSpec::Absorb {
                fallback_delta: StateDelta::new(),
            }),
    )
    .set_aegis(
        "ask",
        Aegis::new().with_timeout(TimeoutPolicy::run(Duration::from_secs(30))),
    );
    assert_ne!(v2.fingerprint(), v1);
    completes(&store, &v2).await;
}

#[tokio::test]
async fn adding_fields_with_defaults_or_optional_continues_with_the_defaults() {
    let (store, _) = parked().await;
    let mut with_new = fields();
    with_new.push(FieldSpec::new(
        FieldName::new("tone").unwrap(),
        DispatchRule::LastWrite,
        Some(json!("formal")),
        false,
    ));
    // Required, but defaulted: a resumed thread needs no input for it.
    with_new.push(FieldSpec::new(
        FieldName::new("region").unwrap(),
        DispatchRule::LastWrite,
        Some(json!("eu")),
        true,
    ));
    with_new.push(field("notes", DispatchRule::Append));
    with_new.push(field("reviewer", DispatchRule::LastWrite));
    let state = completes(&store, &graph(with_new)).await;
    assert_eq!(state.get("tone"), Some(&json!("formal")));
    assert_eq!(state.get("region"), Some(&json!("eu")));
    assert_eq!(state.get("notes"), Some(&json!([])));
    assert_eq!(state.get("reviewer"), None);
    assert_eq!(log(&state), json!(["drafted"]));
}

#[tokio::test]
async fn removing_the_waiting_node_is_refused_with_the_reason() {
    let (store, v1) = parked().await;
    let mut v2 = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    v2.add_node("draft", draft())
        .add_edge(START, "draft")
        .add_edge("draft", END);
    let (reasons, changes, message) = refused(&store, &v2).await;
    assert_eq!(
        reasons,
        [Incompatibility::PendingNodeRemoved {
            node: NodeId::new("ask")
        }]
    );
    assert_eq!(
        changes,
        [GraphChange::NodeRemoved {
            node: NodeId::new("ask"),
            kind: "function:ask".into()
        }]
    );
    assert!(
        message.contains("node `ask`, which this graph no longer has"),
        "{message}"
    );
    assert!(
        message.contains(&v1) && message.contains(&v2.fingerprint()),
        "{message}"
    );
    // Nothing was written: the thread still resumes on its own graph.
    completes(&store, &graph(fields())).await;
}

#[tokio::test]
async fn changing_the_waiting_nodes_kind_is_refused_with_the_reason() {
    let (store, _) = parked().await;
    let mut v2 = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    v2.add_node("draft", draft())
        .add_node("ask", ask("ask_twice"))
        .add_edge(START, "draft")
        .add_edge("draft", "ask")
        .add_edge("ask", END);
    let (reasons, changes, _) = refused(&store, &v2).await;
    assert_eq!(
        reasons,
        [Incompatibility::PendingNodeKindChanged {
            node: NodeId::new("ask"),
            from: "function:ask".into(),
            to: "function:ask_twice".into(),
        }]
    );
    assert_eq!(changes.len(), 1, "{changes:?}");
}

#[tokio::test]
async fn changing_a_stored_fields_dispatch_rule_is_refused_with_the_reason() {
    let (store, _) = parked().await;
    let mut changed = fields();
    changed[1] = field("log", DispatchRule::LastWrite);
    let (reasons, changes, message) = refused(&store, &graph(changed)).await;
    let expected = Incompatibility::StoredFieldDispatchChanged {
        field: FieldName::new("log").unwrap(),
        from: DispatchRule::Append,
        to: DispatchRule::LastWrite,
    };
    assert_eq!(reasons, [expected]);
    assert_eq!(
        changes,
        [GraphChange::FieldDispatchChanged {
            field: FieldName::new("log").unwrap(),
            from: DispatchRule::Append,
            to: DispatchRule::LastWrite,
        }]
    );
    assert!(
        message.contains("field `log`, whose dispatch rule changed from Append to LastWrite"),
        "{message}"
    );
}

#[tokio::test]
async fn removing_a_stored_field_or_adding_a_required_one_is_refused() {
    let (store, _) = parked().await;
    let mut changed = fields();
    changed.remove(1);
    changed.push(FieldSpec::new(
        FieldName::new("owner").unwrap(),
        DispatchRule::LastWrite,
        None,
        true,
    ));
    let (reasons, changes, _) = refused(&store, &graph(changed)).await;
    assert_eq!(
        reasons,
        [
            Incompatibility::StoredFieldRemoved {
                field: FieldName::new("log").unwrap()
            },
            Incompatibility::NewFieldRequired {
                field: FieldName::new("owner").unwrap()
            },
        ]
    );
    assert_eq!(
        changes,
        [
            GraphChange::FieldRemoved {
                field: FieldName::new("log").unwrap()
            },
            GraphChange::FieldAdded {
                field: FieldName::new("owner").unwrap()
            },
        ]
    );
}

/// The second version keeps the log as one string.
fn string_log_graph() -> WarGraph {
    let mut changed = fields();
    changed[1] = field("log", DispatchRule::LastWrite);
    graph(changed)
}

#[tokio::test]
async fn a_migration_carries_the_thread_over_and_is_recorded() {
    let (store, v1) = parked().await;
    let mut v2 = string_log_graph();
    v2.with_migration(
        Migration::new("log-as-text", v1.clone()).with_state(|mut state: Value| {
            let joined = state["log"]
                .as_array()
                .ok_or_else(|| MigrationError::new("log is not a list"))?
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n");
            state["log"] = json!(joined);
            Ok(state)
        }),
    );
    let state = completes(&store, &v2).await;
    assert_eq!(log(&state), json!("drafted"));
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.fingerprint, v2.fingerprint());
    assert_eq!(
        latest.previous_graph.as_deref(),
        Some(&PreviousGraph::new(v1).with_migration("log-as-text", []))
    );
}

#[tokio::test]
async fn a_failing_or_misfitting_migration_is_refused_with_its_reason() {
    let (store, v1) = parked().await;
    let mut failing = string_log_graph();
    failing.with_migration(
        Migration::new("fails", v1.clone()).with_state(|_| Err(MigrationError::new("no way back"))),
    );
    let (reasons, _, message) = refused(&store, &failing).await;
    assert_eq!(
        reasons,
        [Incompatibility::MigrationFailed {
            message: "no way back".into()
        }]
    );
    assert!(
        message.contains("the migration failed: no way back"),
        "{message}"
    );

    // A state with a field the new schema does not declare does not fit.
    let mut misfit = string_log_graph();
    misfit.with_migration(
        Migration::new("ghost", v1.clone()).with_state(|mut state: Value| {
            state["ghost"] = json!(1);
            Ok(state)
        }),
    );
    let (reasons, _, _) = refused(&store, &misfit).await;
    assert!(
        matches!(&reasons[..], [Incompatibility::StateDoesNotFit { message }] if message.contains("ghost")),
        "{reasons:?}"
    );

    // A migration from another fingerprint does not apply.
    let mut elsewhere = string_log_graph();
    elsewhere.with_migration(Migration::new("other", "v7:not-this-thread").with_state(Ok));
    let (reasons, _, _) = refused(&store, &elsewhere).await;
    assert!(
        matches!(
            reasons[..],
            [Incompatibility::StoredFieldDispatchChanged { .. }]
        ),
        "{reasons:?}"
    );
}

/// The first version with `ask` renamed `approve` (the node itself,
/// kind and code, unchanged unless `kind` says otherwise).
fn renamed_graph(kind: &'static str) -> WarGraph {
    let mut g = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    g.add_node("draft", draft())
        .add_node("approve", ask(kind))
        .add_edge(START, "draft")
        .add_edge("draft", "approve")
        .add_edge("approve", END);
    g
}

#[tokio::test]
async fn a_migration_renames_the_waiting_node_and_the_move_is_recorded() {
    let (store, v1) = parked().await;
    // Without a migration the renamed node is refused, naming the old one.
    let (reasons, _, _) = refused(&store, &renamed_graph("ask")).await;
    assert_eq!(
        reasons,
        [Incompatibility::PendingNodeRemoved {
            node: NodeId::new("ask")
        }]
    );

    let mut v2 = renamed_graph("ask");
    v2.with_migration(Migration::new("ask-is-approve", v1.clone()).map_node("ask", "approve"));
    // The answer reaches the node under its new name.
    let state = completes(&store, &v2).await;
    assert_eq!(log(&state), json!(["drafted"]));
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.fingerprint, v2.fingerprint());
    let moved = PreviousGraph::new(v1.clone()).with_migration(
        "ask-is-approve",
        [(NodeId::new("ask"), NodeId::new("approve"))],
    );
    assert_eq!(latest.previous_graph.as_deref(), Some(&moved));
    assert_eq!(
        latest
            .records
            .iter()
            .map(|r| r.node_id.as_str())
            .collect::<Vec<_>>(),
        ["approve"]
    );
    // The visit the thread made as `ask` is `approve`'s (the re-run after
    // an answer continues it), and no count is left under the old name.
    assert_eq!(
        latest
            .visits()
            .map(|(n, c)| (n.as_str(), c))
            .collect::<Vec<_>>(),
        [("approve", 1), ("draft", 1)]
    );
    // Chronicle lists the move: which migration, from and to.
    let moves = engine(&store).chronicle().graph_moves("t").await.unwrap();
    assert_eq!(moves.len(), 1);
    let m = &moves[0];
    assert_eq!(
        (m.from.as_str(), m.to.as_str()),
        (v1.as_str(), v2.fingerprint().as_str())
    );
    assert_eq!(m.migration.as_deref(), Some("ask-is-approve"));
    assert_eq!(
        m.mapped_nodes,
        [(NodeId::new("ask"), NodeId::new("approve"))]
    );
}

#[tokio::test]
async fn a_mapped_node_may_change_kind_but_must_exist() {
    let (store, v1) = parked().await;
    // Replaced by a node of another kind: the migration says so.
    let mut v2 = renamed_graph("approve-v2");
    v2.with_migration(Migration::new("replace", v1.clone()).map_node("ask", "approve"));
    completes(&store, &v2).await;

    // Mapped to a node the graph does not have: refused, naming both.
    let (store, v1) = parked().await;
    let mut missing = renamed_graph("ask");
    missing.with_migration(Migration::new("typo", v1).map_node("ask", "aprove"));
    let (reasons, _, message) = refused(&store, &missing).await;
    assert_eq!(
        reasons,
        [Incompatibility::MappedNodeMissing {
            from: NodeId::new("ask"),
            to: NodeId::new("aprove")
        }]
    );
    assert!(
        message.contains("`ask`") && message.contains("`aprove`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_migration_maps_nodes_and_rewrites_state_together() {
    let (store, v1) = parked().await;
    let mut changed = fields();
    changed[1] = field("log", DispatchRule::LastWrite);
    let mut v2 = WarGraph::new(BattlefieldSchema::new(changed), EngineLimits::default());
    v2.add_node("draft", draft())
        .add_node("approve", ask("ask"))
        .add_edge(START, "draft")
        .add_edge("draft", "approve")
        .add_edge("approve", END);
    v2.with_migration(
        Migration::new("both", v1)
            .map_node("ask", "approve")
            .with_state(|mut state: Value| {
                state["log"] = json!("flattened");
                Ok(state)
            }),
    );
    let state = completes(&store, &v2).await;
    assert_eq!(log(&state), json!("flattened"));
}

#[tokio::test]
async fn a_migration_cannot_bring_back_the_waiting_node() {
    let (store, v1) = parked().await;
    let mut v2 = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    v2.add_node("draft", draft())
        .add_edge(START, "draft")
        .add_edge("draft", END)
        .with_migration(Migration::new("keep", v1).with_state(Ok));
    let (reasons, _, _) = refused(&store, &v2).await;
    assert_eq!(
        reasons,
        [Incompatibility::PendingNodeRemoved {
            node: NodeId::new("ask")
        }]
    );
}

#[tokio::test]
async fn mustered_tasks_need_their_worker_template() {
    // Halted with the tasks of `score` due: `score` must stay a template.
    let schema = || BattlefieldSchema::new(vec![field("scores", DispatchRule::Append)]);
    let split = || {
        NodeSpec::from_fn("split", |_, _| {
            Box::pin(async {
                Ok(Directive::muster(
                    StateDelta::new(),
                    "score",
                    [("a".to_string(), json!(1)), ("b".to_string(), json!(2))],
                ))
            })
        })
    };
    let score = || {
        NodeSpec::from_fn("score", |_, _| {
            Box::pin(async {
                let mut d = StateDelta::new();
                d.set("scores", 1)?;
                Ok(d.into())
            })
        })
    };
    let mut v1 = WarGraph::new(schema(), EngineLimits::default());
    v1.add_node("split", split())
        .add_worker_template("score", score())
        .add_edge(START, "split")
        .add_edge("score", END);
    let store = Arc::new(InMemoryWaypointStore::new());
    // Halt once the first superstep (the muster) is merged.
    struct HaltAfterFirstStep(CancellationToken);
    impl TraceSink for HaltAfterFirstStep {
        fn emit(&self, event: TraceEvent) {
            if matches!(event, TraceEvent::SuperstepFinished { .. }) {
                self.0.cancel();
            }
        }
    }
    let token = CancellationToken::new();
    let halted = engine(&store)
        .with_cancellation(token.clone())
        .with_trace_sink(HaltAfterFirstStep(token))
        .start(&v1, "t", json!({}))
        .await
        .unwrap();
    let RunOutcome::Halted { vanguard, .. } = &halted else {
        panic!("{halted:?}")
    };
    assert!(
        vanguard.iter().all(|n| n.as_str() == "score"),
        "{vanguard:?}"
    );

    let mut v2 = WarGraph::new(schema(), EngineLimits::default());
    v2.add_node("split", split())
        .add_node("score", score())
        .add_edge(START, "split")
        .add_edge("split", "score")
        .add_edge("score", END);
    let err = engine(&store).resume(&v2, "t", None).await.unwrap_err();
    let EngineError::GraphMismatch { reasons, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        reasons,
        &[Incompatibility::WorkerTemplateGone {
            node: NodeId::new("score")
        }]
    );
}

// ---------------------------------------------------------------------------
// A thread written by the previous version.
//
// `tests/fixtures/deploys_v1_thread.jsonl` holds the rows the previous
// version (waypoint format 1, fingerprint v6, no manifest) stored for a
// thread of `graph(fields())` parked on `ask`'s parley: one payload per
// line, seq 0, 1, ... The tests plant them in a fresh store, as that
// version left them, and resume the thread on this version's graph.

const FIXTURE: &str = include_str!("fixtures/deploys_v1_thread.jsonl");
const FIXTURE_THREAD: &str = "deploy-v1";

/// The stored columns of each fixture row: seq, superstep, status name,
/// whether it is a snapshot, created_at in ms, payload.
fn fixture_rows() -> Vec<(i64, i64, String, bool, i64, Vec<u8>)> {
    FIXTURE
        .lines()
        .enumerate()
        .map(|(seq, line)| {
            let row: Value = serde_json::from_str(line).unwrap();
            assert_eq!(row["format"], json!(1));
            assert!(row.get("manifest").is_none());
            let status = match &row["status"] {
                Value::String(s) => s.clone(),
                Value::Object(o) => o.keys().next().unwrap().clone(),
                other => panic!("{other}"),
            };
            let ms = row["created_at"]["secs_since_epoch"].as_i64().unwrap() * 1000;
            (
                seq as i64,
                row["superstep"].as_i64().unwrap(),
                status,
                row["state"].get("snapshot").is_some(),
                ms,
                line.as_bytes().to_vec(),
            )
        })
        .collect()
}

fn snapshot_seq() -> i64 {
    fixture_rows()
        .iter()
        .filter(|r| r.3)
        .map(|r| r.0)
        .max()
        .unwrap()
}

/// Resumes the planted thread: refused without `ask`, then continued on
/// this version's graph, recording the previous version's fingerprint.
async fn resume_the_previous_versions_thread<S: WaypointStore>(store: Arc<S>) {
    let engine = || WarEngine::new(store.clone());
    let before = store.latest(FIXTURE_THREAD).await.unwrap().unwrap();
    assert!(before.fingerprint.starts_with("v6:") && before.manifest.is_none());
    assert_eq!(before.status.name(), "AwaitingInput");

    // Even without a manifest, the waiting node must still exist.
    let mut without_ask = WarGraph::new(BattlefieldSchema::new(fields()), EngineLimits::default());
    without_ask
        .add_node("draft", draft())
        .add_edge(START, "draft")
        .add_edge("draft", END);
    let err = engine()
        .resume(&without_ask, FIXTURE_THREAD, yes())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::GraphMismatch { reasons, changes, .. }
            if reasons == &[Incompatibility::PendingNodeRemoved { node: NodeId::new("ask") }]
            && changes.is_empty()),
        "{err:?}"
    );

    let v2 = graph(fields());
    let out = engine().resume(&v2, FIXTURE_THREAD, yes()).await.unwrap();
    let RunOutcome::Completed { state, .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!(state.get("answer"), Some(&json!("yes")));
    assert_eq!(log(&state), json!(["drafted"]));
    assert_eq!(state.get("question"), Some(&json!("ship it?")));
    let latest = store.latest(FIXTURE_THREAD).await.unwrap().unwrap();
    assert_eq!(latest.fingerprint, v2.fingerprint());
    assert_eq!(latest.manifest.as_deref(), Some(&v2.manifest()));
    assert_eq!(
        latest.previous_graph.as_deref(),
        Some(&PreviousGraph::new(before.fingerprint))
    );
    // The whole history reads back, old rows and new.
    let history = store.history(FIXTURE_THREAD).await.unwrap();
    assert!(history.len() > fixture_rows().len());
}

#[tokio::test]
async fn a_thread_the_previous_version_wrote_to_sqlite_resumes() {
    let dir = stores::TempDir::new("deploys");
    let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    {
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        for (seq, superstep, status, snapshot, ms, payload) in fixture_rows() {
            conn.execute(
                "INSERT INTO aegis_waypoints \
                 (thread_id, seq, superstep, status, is_snapshot, created_at_ms, payload) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    FIXTURE_THREAD,
                    seq,
                    superstep,
                    status,
                    snapshot,
                    ms,
                    payload
                ],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO aegis_threads (thread_id, next_seq, snapshot_seq) VALUES (?1, ?2, ?3)",
            rusqlite::params![FIXTURE_THREAD, fixture_rows().len() as i64, snapshot_seq()],
        )
        .unwrap();
    }
    resume_the_previous_versions_thread(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_thread_the_previous_version_wrote_to_postgres_resumes() {
    let schema = stores::unique_schema("deploys");
    let store = Arc::new(stores::pg_store(&schema).await);
    let (client, connection) = tokio_postgres::connect(&stores::pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    for (seq, superstep, status, snapshot, ms, payload) in fixture_rows() {
        client
            .execute(
                &format!(
                    "INSERT INTO \"{schema}\".aegis_waypoints \
                     (thread_id, seq, superstep, status, is_snapshot, created_at_ms, payload) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)"
                ),
                &[
                    &FIXTURE_THREAD,
                    &seq,
                    &superstep,
                    &status,
                    &snapshot,
                    &ms,
                    &payload,
                ],
            )
            .await
            .unwrap();
    }
    client
        .execute(
            &format!(
                "INSERT INTO \"{schema}\".aegis_threads (thread_id, next_seq, snapshot_seq) \
                 VALUES ($1, $2, $3)"
            ),
            &[
                &FIXTURE_THREAD,
                &(fixture_rows().len() as i64),
                &snapshot_seq(),
            ],
        )
        .await
        .unwrap();
    drop(client);
    let _ = driver.await;
    resume_the_previous_versions_thread(store).await;
    stores::drop_pg_schema(&schema).await;
}
