//! Effects from node code through the engine: a done effect is never
//! called again (retries, resumes), keys are stable per thread and differ
//! on a fork, each unknown-outcome policy does what it says, results are
//! bounded and redacted; and every ledger (in-memory, SQLite) follows the
//! ledger's state machine under random operations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::stores::TempDir;

use aegis::engine::{StreamMode, StreamOptions};
use aegis::error::{EngineError, StoreError};
use aegis::graph::{
    EffectAnswer, EffectEntry, EffectError, EffectKey, EffectLedger, EffectOutcome, EffectStart,
    EffectState, EngineLimits, NodeSpec, OnUnknown,
};
use aegis::prelude::*;
use aegis::trace::{CollectingTraceSink, TraceEvent};
use aegis::waypoint::{Chronicle, InMemoryEffectLedger, SqliteWaypointStore, Waypoint};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Fail,
    Retry,
    /// Reconcile, finding the charge (`true`) or not.
    Reconcile(bool),
    Human,
}

/// What the payment node saw: the keys it was called with.
#[derive(Default)]
struct Calls {
    keys: Mutex<Vec<String>>,
    reconciles: AtomicU32,
}

impl Calls {
    fn count(&self) -> usize {
        self.keys.lock().unwrap().len()
    }
}

/// One node `pay` charging through an effect, then failing its first
/// attempt after the charge when `fail_after` (so it is retried).
fn pay_graph(calls: Arc<Calls>, policy: Policy, fail_after: bool) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("receipt").unwrap(),
        DispatchRule::LastWrite,
        None,
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "pay",
        NodeSpec::from_fn("pay", move |_, ctx| {
            let calls = calls.clone();
            Box::pin(async move {
                let effect = ctx.effect("charge");
                let effect = match policy {
                    Policy::Fail => effect,
                    Policy::Retry => effect.on_unknown(OnUnknown::RetrySameKey),
                    Policy::Human => effect.on_unknown(OnUnknown::AskHuman),
                    Policy::Reconcile(found) => {
                        let calls = calls.clone();
                        effect.reconcile(move |key: EffectKey| async move {
                            calls.reconciles.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, String>(
                                found.then(|| json!({ "charge": format!("found-{key}") })),
                            )
                        })
                    }
                };
                let receipt: Value = effect
                    .run(|key| {
                        let calls = calls.clone();
                        async move {
                            calls.keys.lock().unwrap().push(key.to_string());
                            Ok::<_, String>(json!({ "charge": format!("ch-{key}") }))
                        }
                    })
                    .await?;
                if fail_after && ctx.attempt() == 1 {
                    return Err(StateNodeError::transient("crashed after the charge"));
                }
                let mut d = StateDelta::new();
                d.set("receipt", receipt)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "pay")
    .add_edge("pay", END);
    g.set_aegis(
        "pay",
        Aegis::new().with_retry(
            RetryPolicy::default()
                .with_max_attempts(3)
                .with_initial_interval(Duration::from_millis(1))
                .with_jitter(false),
        ),
    );
    g
}

fn key(thread: &str) -> EffectKey {
    EffectKey::derive(thread, "pay", None, "charge", None)
}

/// A crash between the call and its record: the ledger holds the effect as
/// started, with no result.
async fn started_without_result(store: &InMemoryWaypointStore, thread: &str) {
    let ledger = store.effect_ledger().unwrap();
    let start = EffectStart::new(key(thread).as_str(), thread, "pay", "charge");
    assert_eq!(ledger.begin(&start).await.unwrap(), None);
}

async fn entry(store: &InMemoryWaypointStore, thread: &str) -> EffectEntry {
    let entries = store
        .effect_ledger()
        .unwrap()
        .entries(thread)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_retried_node_does_not_call_its_done_effect_again() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone());
    let g = pay_graph(calls.clone(), Policy::Fail, true);
    let state = engine
        .start(&g, "t1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(calls.count(), 1, "called once over two attempts");
    let k = key("t1");
    assert_eq!(calls.keys.lock().unwrap()[0], k.as_str());
    assert_eq!(
        state.get("receipt"),
        Some(&json!({ "charge": format!("ch-{k}") }))
    );
    let e = entry(&store, "t1").await;
    assert_eq!((e.state, e.starts), (EffectState::Done, 1));
    assert_eq!(e.node_id, "pay");
    assert_eq!(e.name, "charge");
}

#[tokio::test]
async fn keys_are_stable_per_thread_and_differ_on_a_fork() {
    let k = key("t1");
    assert!(
        k.as_str().starts_with("aegis-") && k.as_str().len() == 38,
        "{k}"
    );
    assert!(
        k.as_str()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    );
    assert_eq!(k, key("t1"));
    for other in [
        EffectKey::derive("t2", "pay", None, "charge", None),
        EffectKey::derive("t1", "pay2", None, "charge", None),
        EffectKey::derive("t1", "pay", Some("task-0"), "charge", None),
        EffectKey::derive("t1", "pay", None, "refund", None),
        EffectKey::derive("t1", "pay", None, "charge", Some("order-7")),
        // Boundaries move nothing together.
        EffectKey::derive("t1p", "ay", None, "charge", None),
    ] {
        assert_ne!(other, k);
    }

    // A fork from before the charge charges again, under its own key.
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone());
    let g = pay_graph(calls.clone(), Policy::Fail, false);
    engine.start(&g, "t1", json!({})).await.unwrap();
    Chronicle::new(store.clone())
        .fork("t1", 0, "t1-fork")
        .await
        .unwrap();
    engine.resume(&g, "t1-fork", None).await.unwrap();
    let keys = calls.keys.lock().unwrap().clone();
    assert_eq!(
        keys,
        vec![key("t1").to_string(), key("t1-fork").to_string()]
    );
}

#[tokio::test]
async fn an_unknown_outcome_fails_permanently_by_default_without_a_call() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    started_without_result(&store, "t1").await;
    let g = pay_graph(calls.clone(), Policy::Fail, false);
    let outcome = WarEngine::new(store.clone())
        .start(&g, "t1", json!({}))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}")
    };
    let text = error.to_string();
    assert!(
        text.contains("unknown outcome") && text.contains(key("t1").as_str()),
        "{text}"
    );
    assert!(
        matches!(error, EngineError::NodeFailed(ref e) if e.attempt == 1),
        "{error:?}"
    );
    assert_eq!(calls.count(), 0);
    assert_eq!(entry(&store, "t1").await.state, EffectState::Started);
}

#[tokio::test]
async fn retry_same_key_calls_again_with_the_same_key() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    started_without_result(&store, "t1").await;
    let g = pay_graph(calls.clone(), Policy::Retry, false);
    WarEngine::new(store.clone())
        .start(&g, "t1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(*calls.keys.lock().unwrap(), vec![key("t1").to_string()]);
    let e = entry(&store, "t1").await;
    assert_eq!((e.state, e.starts), (EffectState::Done, 2));
}

#[tokio::test]
async fn reconcile_records_what_the_outside_system_says_or_calls_again() {
    for found in [true, false] {
        let calls = Arc::new(Calls::default());
        let store = Arc::new(InMemoryWaypointStore::new());
        started_without_result(&store, "t1").await;
        let g = pay_graph(calls.clone(), Policy::Reconcile(found), false);
        let state = WarEngine::new(store.clone())
            .start(&g, "t1", json!({}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(calls.reconciles.load(Ordering::SeqCst), 1);
        let k = key("t1");
        let e = entry(&store, "t1").await;
        if found {
            assert_eq!(calls.count(), 0, "reconciled: never called");
            assert_eq!(
                state.get("receipt"),
                Some(&json!({ "charge": format!("found-{k}") }))
            );
            assert_eq!(e.starts, 1);
        } else {
            assert_eq!(calls.count(), 1, "not found: called again");
            assert_eq!(
                state.get("receipt"),
                Some(&json!({ "charge": format!("ch-{k}") }))
            );
            assert_eq!(e.starts, 2);
        }
        assert_eq!(e.state, EffectState::Done);
    }
}

#[tokio::test]
async fn ask_human_parleys_with_the_key_and_the_answer_completes_the_run() {
    for (answer, called) in [("done", 0), ("not_done", 1), ("failed", 0)] {
        let calls = Arc::new(Calls::default());
        let store = Arc::new(InMemoryWaypointStore::new());
        started_without_result(&store, "t1").await;
        let g = pay_graph(calls.clone(), Policy::Human, false);
        let engine = WarEngine::new(store.clone());
        let outcome = engine.start(&g, "t1", json!({})).await.unwrap();
        let RunOutcome::AwaitingInput { requests, .. } = outcome else {
            panic!("{outcome:?}")
        };
        let k = key("t1");
        let (node, request) = &requests[0];
        assert_eq!(node.as_str(), "pay");
        assert!(request.prompt.contains(k.as_str()), "{}", request.prompt);
        assert_eq!(request.payload["effect_key"], json!(k.as_str()));
        assert_eq!(request.payload["effect"], json!("charge"));
        assert_eq!(request.payload["starts"], json!(1));
        let response = match answer {
            "done" => EffectAnswer::done(k.as_str(), json!({ "charge": "by-hand" })),
            "not_done" => EffectAnswer::not_done(k.as_str()),
            _ => EffectAnswer::failed(k.as_str()),
        };
        let outcome = engine.resume(&g, "t1", Some(response)).await.unwrap();
        assert_eq!(calls.count(), called, "{answer}");
        match answer {
            "failed" => assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}"),
            "done" => assert_eq!(
                outcome.into_result().unwrap().get("receipt"),
                Some(&json!({ "charge": "by-hand" }))
            ),
            _ => assert_eq!(
                outcome.into_result().unwrap().get("receipt"),
                Some(&json!({ "charge": format!("ch-{k}") }))
            ),
        }
    }
}

#[tokio::test]
async fn results_are_redacted_bounded_and_typed() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(InMemoryEffectLedger::new());
    let ctx = NodeContext::detached("pay").with_effect_ledger(ledger.clone());
    let secret = "sk-abcdefghijklmnopqrstuvwxyz012345";
    let first: Value = ctx
        .effect("token")
        .run(|_| async move { Ok::<_, String>(json!({ "id": 1, "api_key": secret })) })
        .await
        .unwrap();
    // The first run returns what a replay will: the recorded, redacted value.
    assert_eq!(first["id"], json!(1));
    assert_ne!(first["api_key"], json!(secret));
    let replay: Value = ctx
        .effect("token")
        .run(|_| async move { Err::<Value, _>("never called") })
        .await
        .unwrap();
    assert_eq!(replay, first);
    let stored = ledger.entries("detached").await.unwrap();
    assert!(!serde_json::to_string(&stored).unwrap().contains(secret));

    let big = ctx
        .effect("big")
        .with_max_result_bytes(16)
        .run(|_| async move { Ok::<_, String>("x".repeat(100)) })
        .await;
    let Err(e @ EffectError::Unrecordable { .. }) = big else {
        panic!("{big:?}")
    };
    assert!(e.to_string().contains("over the limit of 16"), "{e}");
    // Not recorded: a later attempt finds an unknown outcome.
    let again = ctx
        .effect("big")
        .run(|_| async move { Ok::<_, String>("x".to_string()) })
        .await;
    assert!(
        matches!(again, Err(EffectError::UnknownOutcome { .. })),
        "{again:?}"
    );

    // A failed call leaves an unknown outcome, and redacts its message.
    let failed = ctx
        .effect("down")
        .run(|_| async move { Err::<Value, _>(format!("refused with {secret}")) })
        .await;
    let Err(e @ EffectError::Call { .. }) = failed else {
        panic!("{failed:?}")
    };
    assert!(!e.to_string().contains(secret), "{e}");
    assert_eq!(
        StateNodeError::from(e).transience,
        aegis::error::Transience::Transient
    );
    let retried: String = ctx
        .effect("down")
        .on_unknown(OnUnknown::RetrySameKey)
        .run(|_| async move { Ok::<_, String>("up".to_string()) })
        .await
        .unwrap();
    assert_eq!(retried, "up");

    // A reconcile policy without its function calls nothing.
    let refused = ctx
        .effect("misconfigured")
        .on_unknown(OnUnknown::Reconcile)
        .run(|_| async move { Ok::<_, String>(1) })
        .await;
    assert!(
        matches!(refused, Err(EffectError::Misconfigured { ref message, .. }) if message.contains("reconcile function")),
        "{refused:?}"
    );
    assert!(
        ledger
            .entries("detached")
            .await
            .unwrap()
            .iter()
            .all(|e| e.name != "misconfigured")
    );
}

#[tokio::test]
async fn a_store_without_a_ledger_refuses_effects_rather_than_call_unrecorded() {
    struct Plain(InMemoryWaypointStore);
    #[async_trait]
    impl WaypointStore for Plain {
        async fn put(&self, w: Waypoint) -> Result<(), StoreError> {
            self.0.put(w).await
        }
        async fn latest(&self, t: &str) -> Result<Option<Waypoint>, StoreError> {
            self.0.latest(t).await
        }
        async fn history(&self, t: &str) -> Result<Vec<Waypoint>, StoreError> {
            self.0.history(t).await
        }
    }
    let calls = Arc::new(Calls::default());
    let g = pay_graph(calls.clone(), Policy::Retry, false);
    let outcome = WarEngine::new(Plain(InMemoryWaypointStore::new()))
        .start(&g, "t1", json!({}))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        error.to_string().contains("keeps no effect ledger"),
        "{error}"
    );
    assert_eq!(calls.count(), 0);
}

#[tokio::test]
async fn the_stream_tells_what_became_of_each_effect() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    started_without_result(&store, "t1").await;
    let g = pay_graph(calls.clone(), Policy::Retry, false);
    let engine = WarEngine::new(store.clone());
    let mut stream = engine.stream_with(
        &g,
        "t1",
        json!({}),
        StreamOptions::new([StreamMode::Custom]),
    );
    let mut states = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { payload, .. } = event {
            assert_eq!(payload["effect_key"], json!(key("t1").as_str()));
            states.push(payload["state"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(states, ["unknown", "retried_same_key", "done"]);
}

#[tokio::test]
async fn records_and_the_timeline_show_each_attempt_s_effects() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(InMemoryWaypointStore::new());
    started_without_result(&store, "t1").await;
    let g = pay_graph(calls.clone(), Policy::Reconcile(false), true);
    let sink = CollectingTraceSink::new();
    WarEngine::new(store.clone())
        .with_trace_sink(sink.clone())
        .start(&g, "t1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    // Traced when the activation ends, the unknown outcome with its key.
    let traced: Vec<(u32, String, EffectOutcome)> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::Effect {
                attempt,
                key,
                outcome,
                effect,
                node_id,
                ..
            } => {
                assert_eq!((effect.as_str(), node_id.as_str()), ("charge", "pay"));
                Some((attempt, key, outcome))
            }
            _ => None,
        })
        .collect();
    let kk = key("t1").to_string();
    assert_eq!(
        traced,
        [
            (1, kk.clone(), EffectOutcome::Unknown),
            (1, kk.clone(), EffectOutcome::ReconciledNotDone),
            (1, kk.clone(), EffectOutcome::Done),
            (2, kk.clone(), EffectOutcome::Replayed),
        ]
    );
    let history = store.history("t1").await.unwrap();
    let record = history
        .iter()
        .flat_map(|w| w.records.iter())
        .find(|r| r.node_id.as_str() == "pay")
        .unwrap();
    let k = key("t1");
    let notes: Vec<_> = record
        .effects()
        .iter()
        .map(|n| (n.attempt, n.name.as_str(), n.key.as_str(), n.outcome))
        .collect();
    assert_eq!(
        notes,
        [
            (1, "charge", k.as_str(), EffectOutcome::Unknown),
            (1, "charge", k.as_str(), EffectOutcome::ReconciledNotDone),
            (1, "charge", k.as_str(), EffectOutcome::Done),
            // Attempt 2 (attempt 1 failed after its charge) replays it.
            (2, "charge", k.as_str(), EffectOutcome::Replayed),
        ]
    );
    let html = aegis::render::timeline(&history);
    assert!(
        html.contains(&format!("effect charge {k}: reconciled_not_done")),
        "{html}"
    );
    assert!(html.contains(&format!("effect charge {k}: replayed")));

    // A node without effects records none, and its record stays plain.
    let plain = history
        .iter()
        .flat_map(|w| w.records.iter())
        .filter(|r| r.node_id.as_str() != "pay")
        .all(|r| r.effects().is_empty());
    assert!(plain);
}

// ---- The ledger's state machine, under random operations ----

#[derive(Debug, Clone)]
enum Op {
    Begin(usize),
    Restart(usize),
    Finish(usize, i64),
}

/// The reference model: the table in the ledger's docs, written again.
#[derive(Default)]
struct Model(BTreeMap<usize, (EffectState, u32, Option<Value>)>);

impl Model {
    /// Applies `op`; for a begin, what it returns (the prior state).
    fn apply(&mut self, op: &Op) -> Option<Option<(EffectState, u32, Option<Value>)>> {
        match *op {
            Op::Begin(k) => {
                let prior = self.0.get(&k).cloned();
                if prior.is_none() {
                    self.0.insert(k, (EffectState::Started, 1, None));
                }
                Some(prior)
            }
            Op::Restart(k) => {
                if let Some(e) = self.0.get_mut(&k)
                    && e.0 == EffectState::Started
                {
                    e.1 += 1;
                }
                None
            }
            Op::Finish(k, v) => {
                if let Some(e) = self.0.get_mut(&k)
                    && e.0 == EffectState::Started
                {
                    *e = (EffectState::Done, e.1, Some(json!(v)));
                }
                None
            }
        }
    }
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..3usize).prop_map(Op::Begin),
        (0..3usize).prop_map(Op::Restart),
        (0..3usize, 0..5i64).prop_map(|(k, v)| Op::Finish(k, v)),
    ]
}

async fn check_ledger(ledger: &dyn EffectLedger, thread: &str, ops: &[Op]) {
    let key = |k: usize| format!("{thread}-k{k}");
    let mut model = Model::default();
    for op in ops {
        let expected = model.apply(op);
        match op {
            Op::Begin(k) => {
                let start = EffectStart::new(key(*k), thread, "n", format!("e{k}"));
                let got = ledger.begin(&start).await.unwrap();
                let got = got.map(|e| (e.state, e.starts, e.result));
                assert_eq!(Some(got), expected, "{op:?} after {ops:?}");
            }
            Op::Restart(k) => ledger.restart(&key(*k)).await.unwrap(),
            Op::Finish(k, v) => ledger.finish(&key(*k), &json!(v)).await.unwrap(),
        }
    }
    let entries = ledger.entries(thread).await.unwrap();
    let got: Vec<_> = entries
        .into_iter()
        .map(|e| (e.key, e.state, e.starts, e.result))
        .collect();
    let want: Vec<_> = model
        .0
        .into_iter()
        .map(|(k, (s, n, r))| (key(k), s, n, r))
        .collect();
    assert_eq!(got, want);
}

fn run_cases(ledger: Arc<dyn EffectLedger>, cases: u32, rt: &tokio::runtime::Runtime) {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let next = AtomicU32::new(0);
    runner
        .run(&proptest::collection::vec(op(), 0..24), |ops| {
            let thread = format!("p{}", next.fetch_add(1, Ordering::Relaxed));
            rt.block_on(check_ledger(&*ledger, &thread, &ops));
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_in_memory_ledger_follows_the_state_machine() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    run_cases(Arc::new(InMemoryEffectLedger::new()), 256, &rt);
}

#[test]
fn the_sqlite_ledger_follows_the_state_machine() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = TempDir::new("effects-props");
    let store = rt.block_on(SqliteWaypointStore::open(dir.db())).unwrap();
    run_cases(store.effect_ledger().unwrap(), 48, &rt);
}

#[tokio::test]
async fn each_mustered_task_has_its_own_key_and_charges_once() {
    let calls = Arc::new(Calls::default());
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        FieldName::new("receipts").unwrap(),
        DispatchRule::Append,
        Some(json!([])),
        false,
    )]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let task_calls = calls.clone();
    g.add_node(
        "fan",
        NodeSpec::from_fn("fan", |_, _| {
            Box::pin(async move {
                Ok(Directive::muster(
                    StateDelta::new(),
                    "charge_task",
                    (0..3).map(|i| (format!("order-{i}"), json!(i))),
                ))
            })
        }),
    )
    .add_worker_template(
        "charge_task",
        NodeSpec::from_fn("charge_task", move |_, ctx| {
            let calls = task_calls.clone();
            Box::pin(async move {
                let receipt: Value = ctx
                    .effect("charge")
                    .run(|key| {
                        let calls = calls.clone();
                        async move {
                            calls.keys.lock().unwrap().push(key.to_string());
                            Ok::<_, String>(json!(key.as_str()))
                        }
                    })
                    .await?;
                // Every task fails its first attempt after its charge.
                if ctx.attempt() == 1 {
                    return Err(StateNodeError::transient("crashed after the charge"));
                }
                let mut d = StateDelta::new();
                d.set("receipts", vec![receipt])?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "fan")
    .add_edge("charge_task", END);
    g.set_aegis(
        "charge_task",
        Aegis::new().with_retry(
            RetryPolicy::default()
                .with_max_attempts(2)
                .with_initial_interval(Duration::from_millis(1))
                .with_jitter(false),
        ),
    );
    let state = WarEngine::new(InMemoryWaypointStore::new())
        .start(&g, "t1", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let expected: Vec<String> = (0..3)
        .map(|i| {
            EffectKey::derive(
                "t1",
                "charge_task",
                Some(&format!("order-{i}")),
                "charge",
                None,
            )
            .to_string()
        })
        .collect();
    let mut keys = calls.keys.lock().unwrap().clone();
    keys.sort();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "one call per task over six attempts");
    assert_eq!(state.get("receipts"), Some(&json!(expected)));
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_ledger_follows_the_state_machine() {
    use aegis::waypoint::{PostgresOptions, PostgresWaypointStore};
    let url = std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string());
    let schema = format!("aegis_effect_props_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(PostgresWaypointStore::connect_with(
            &url,
            PostgresOptions::default().with_schema(&schema),
        ))
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_cases(store.effect_ledger().unwrap(), 24, &rt)
    }));
    rt.block_on(async {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
