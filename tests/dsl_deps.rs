//! `#[aegis]` functions that hold a dependency: `async fn f(deps: &T,
//! state, ctx)` declared with its instance (`f(instance)` in `graph!`,
//! `f::with(instance)` in the builder). The node uses the instance on every
//! attempt, policies apply as to any `#[aegis]` node, and the instance is
//! not part of the graph's identity.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::graph::{AegisDepsFn, AegisDepsNode};
use aegis::prelude::*;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fixtures::{engine, records, run_to_state};

/// A fake LLM client shared by the test and the node: it fails its first
/// `failures` calls transiently, then answers, and remembers the questions.
struct FakeClient {
    calls: AtomicU32,
    failures: u32,
    seen: Mutex<Vec<String>>,
}

impl FakeClient {
    fn new(failures: u32) -> Arc<Self> {
        Arc::new(FakeClient {
            calls: AtomicU32::new(0),
            failures,
            seen: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    async fn ask(&self, question: &str) -> Result<String, StateNodeError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.lock().unwrap().push(question.to_string());
        if call <= self.failures {
            return Err(StateNodeError::transient(format!("503 on call {call}")));
        }
        Ok(format!("answer to {question}"))
    }
}

#[aegis(retry(max = 3, initial = "1s", factor = 2.0, jitter = false))]
async fn answer(
    client: &FakeClient,
    state: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    let question = state
        .get("question")
        .and_then(|q| q.as_str())
        .ok_or_else(|| StateNodeError::permanent("no question"))?;
    let mut delta = StateDelta::new();
    delta.set("answer", client.ask(question).await?)?;
    Ok(delta)
}

fn answer_graph(client: Arc<FakeClient>) -> WarGraph {
    graph! {
        schema { question: LastWrite required, answer: LastWrite }
        nodes { answer(client) }
        edges { START -> answer -> END }
    }
}

#[tokio::test(start_paused = true)]
async fn the_node_uses_its_dependency_on_every_retry() {
    let client = FakeClient::new(2);
    let g = answer_graph(client.clone());
    let e = engine();
    let started = tokio::time::Instant::now();
    let state = run_to_state(&e, &g, "t1", json!({"question": "why"})).await;

    assert_eq!(state.get("answer"), Some(&json!("answer to why")));
    assert_eq!(client.calls(), 3, "two transient failures, then success");
    assert_eq!(*client.seen.lock().unwrap(), ["why", "why", "why"]);
    // The attribute's retry policy governs: 1s, then 2s, between attempts.
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    let attempts: Vec<u32> = records(&e, "t1").await.iter().map(|r| r.attempt).collect();
    assert_eq!(attempts.last(), Some(&3));
}

#[tokio::test(start_paused = true)]
async fn a_node_gives_up_after_the_attributes_attempts() {
    let client = FakeClient::new(10);
    let g = answer_graph(client.clone());
    let outcome = engine()
        .start(&g, "t1", json!({"question": "why"}))
        .await
        .unwrap();
    assert!(outcome.node_error().is_some(), "{outcome:?}");
    assert_eq!(client.calls(), 3, "max = 3 attempts, all on the one client");
}

#[test]
fn the_instance_is_not_part_of_the_graphs_identity() {
    let a = answer_graph(FakeClient::new(0));
    let b = answer_graph(FakeClient::new(7));
    assert_eq!(a.fingerprint(), b.fingerprint());

    // The builder: the marker with its instance, same graph.
    let mut built = WarGraph::new(
        BattlefieldSchema::new(vec![
            FieldSpec::new(
                FieldName::new("question").unwrap(),
                DispatchRule::LastWrite,
                None,
                true,
            ),
            FieldSpec::new(
                FieldName::new("answer").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
        ]),
        EngineLimits::default(),
    );
    built
        .add_aegis_node(answer::with(FakeClient::new(1)))
        .add_edge(START, "answer")
        .add_edge("answer", END);
    assert_eq!(built.fingerprint(), a.fingerprint());
    assert_eq!(
        built.aegis_for(&NodeId::new("answer")),
        Some(&<answer as AegisDepsFn>::aegis())
    );
    assert!(matches!(
        built.node("answer"),
        Some(NodeSpec::Function(n)) if n.kind_name() == "answer"
    ));
}

#[test]
fn with_takes_the_instance_or_a_shared_arc() {
    let shared = FakeClient::new(0);
    let node: AegisDepsNode<answer> = answer::with(shared.clone());
    assert!(
        std::ptr::eq(node.deps(), &*shared),
        "the Arc is shared, not copied"
    );
    let owned = answer::with(FakeClient {
        calls: AtomicU32::new(5),
        failures: 0,
        seen: Mutex::new(Vec::new()),
    });
    assert_eq!(owned.deps().calls(), 5);
    assert_eq!(
        format!("{owned:?}"),
        "AegisDepsNode { kind: \"answer\", .. }"
    );
}

#[aegis(cache(ttl = "1m", key = fields(question)))]
async fn lookup(
    client: &FakeClient,
    state: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    let question = state
        .get("question")
        .and_then(|q| q.as_str())
        .unwrap_or("?");
    let mut delta = StateDelta::new();
    delta.set("answer", client.ask(question).await?)?;
    Ok(delta)
}

#[tokio::test(start_paused = true)]
async fn a_cached_node_with_a_dependency_is_served_from_the_cache() {
    let client = FakeClient::new(0);
    let g = graph! {
        schema { question: LastWrite, answer: LastWrite }
        nodes { lookup(client.clone()) }
        edges { START -> lookup -> END }
    };
    let e = engine().with_node_cache(InMemoryNodeCache::new());
    let first = run_to_state(&e, &g, "t1", json!({"question": "q"})).await;
    let second = run_to_state(&e, &g, "t2", json!({"question": "q"})).await;
    let third = run_to_state(&e, &g, "t3", json!({"question": "other"})).await;
    assert_eq!(first, second);
    assert_eq!(third.get("answer"), Some(&json!("answer to other")));
    assert_eq!(client.calls(), 2, "the second run was a cache hit");
    assert!(records(&e, "t2").await[0].cache_hit);
}

/// A payment gateway that always declines.
struct Gateway {
    charges: AtomicU32,
}

#[aegis(on_error(route = refund, error_field = charge_error))]
async fn charge(
    gateway: &Gateway,
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    gateway.charges.fetch_add(1, Ordering::SeqCst);
    Err(StateNodeError::permanent("card declined"))
}

#[aegis(on_error(absorb(refunded = false)))]
async fn refund(
    gateway: &Gateway,
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    let _ = gateway.charges.load(Ordering::SeqCst);
    Err(StateNodeError::permanent("refunds are down"))
}

#[tokio::test(start_paused = true)]
async fn on_error_routes_and_absorbs_on_nodes_with_dependencies() {
    let gateway = Arc::new(Gateway {
        charges: AtomicU32::new(0),
    });
    let g = graph! {
        schema { charge_error: LastWrite, refunded: LastWrite }
        nodes { charge(gateway.clone()), refund(Arc::clone(&gateway)) }
        edges { START -> charge -> END; refund -> END }
    };
    let state = run_to_state(&engine(), &g, "t1", json!({})).await;
    assert_eq!(gateway.charges.load(Ordering::SeqCst), 1);
    let error = state
        .get("charge_error")
        .expect("the route wrote the error");
    assert!(error.to_string().contains("card declined"), "{error}");
    assert_eq!(
        state.get("refunded"),
        Some(&json!(false)),
        "refund's absorb"
    );
}

#[aegis(id = "asker")]
async fn ask(
    client: &FakeClient,
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("answer", client.ask("fixed").await?)?;
    Ok(delta)
}

#[tokio::test]
async fn a_renamed_node_and_an_override_in_graph_keep_their_dependency() {
    let client = FakeClient::new(1);
    let g = graph! {
        schema { answer: LastWrite }
        nodes { #[aegis(retry(max = 2, initial = "0ms"))] asker = ask(client.clone()) }
        edges { START -> asker -> END }
    };
    let state = run_to_state(&engine(), &g, "t1", json!({})).await;
    assert_eq!(state.get("answer"), Some(&json!("answer to fixed")));
    assert_eq!(client.calls(), 2, "graph!'s own retry governs");
}
