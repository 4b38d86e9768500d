//! Schemas, engines, small nodes, and running a graph to its final state.

use aegis::engine::EdgeConditionEvaluator;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::paladin::Paladin;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::waypoint::NodeExecutionRecord;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A checked field name.
pub fn field_name(name: &str) -> FieldName {
    FieldName::new(name).unwrap()
}

/// A plain field (no default, not required) with dispatch rule `rule`.
pub fn field(name: &str, rule: DispatchRule) -> FieldSpec {
    FieldSpec::new(field_name(name), rule, None, false)
}

pub fn schema(fields: &[(&str, DispatchRule)]) -> BattlefieldSchema {
    BattlefieldSchema::new(fields.iter().map(|(n, r)| field(n, *r)).collect())
}

/// Runs `graph` on a new thread `thread` from `input` to its final state;
/// panics with the outcome when the run does not complete.
pub async fn run_to_state<S: WaypointStore>(
    engine: &WarEngine<S>,
    graph: &WarGraph,
    thread: &str,
    input: Value,
) -> Battlefield {
    let outcome = engine.start(graph, thread, input).await.unwrap();
    match outcome.into_result() {
        Ok(state) => state,
        Err(e) => panic!("the run did not complete: {e}"),
    }
}

pub fn engine() -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(InMemoryWaypointStore::new())
}

/// A fresh engine over the same store, for resuming a halted run.
pub fn engine_on(store: &Arc<InMemoryWaypointStore>) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(store.clone())
}

pub fn delta(pairs: &[(&str, Value)]) -> StateDelta {
    let mut d = StateDelta::new();
    for (k, v) in pairs {
        d.set(*k, v).unwrap();
    }
    d
}

/// A node that writes `value` to `field`.
pub fn write(field: &'static str, value: Value) -> NodeSpec {
    NodeSpec::from_fn("write", move |_, _| {
        let value = value.clone();
        Box::pin(async move { Ok(delta(&[(field, value)]).into()) })
    })
}

/// A node that adds 1 to the `Sum` field `field` and counts its executions.
pub fn bump(field: &'static str, runs: Arc<AtomicU32>) -> NodeSpec {
    NodeSpec::from_fn("bump", move |_, _| {
        runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(delta(&[(field, json!(1))]).into()) })
    })
}

/// A node failing `failures` times with `transience`, then writing `ok`
/// to `out`. Counts every attempt.
pub fn flaky(
    failures: u32,
    transience: Transience,
    attempts: Arc<AtomicU32>,
    out: &'static str,
) -> NodeSpec {
    NodeSpec::from_fn("flaky", move |_, _| {
        let n = attempts.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            if n <= failures {
                Err(StateNodeError::with_transience(
                    format!("failure {n}"),
                    transience,
                ))
            } else {
                Ok(delta(&[(out, json!("ok"))]).into())
            }
        })
    })
}

/// A shared log of instants (on tokio's clock, paused or not).
#[derive(Clone, Default)]
pub struct Clock(pub Arc<Mutex<Vec<tokio::time::Instant>>>);

impl Clock {
    pub fn mark(&self) {
        self.0.lock().unwrap().push(tokio::time::Instant::now());
    }
    pub fn gaps(&self) -> Vec<Duration> {
        let v = self.0.lock().unwrap();
        v.windows(2).map(|w| w[1] - w[0]).collect()
    }
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

pub fn count(c: &Arc<AtomicU32>) -> u32 {
    c.load(Ordering::SeqCst)
}

pub fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// A linear graph START -> n0 -> n1 ... -> END of the given nodes.
pub fn chain(schema: BattlefieldSchema, nodes: Vec<(&str, NodeSpec)>) -> WarGraph {
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let mut prev = START.to_string();
    for (id, spec) in nodes {
        g.add_node(id, spec);
        g.add_edge(prev.as_str(), id);
        prev = id.to_string();
    }
    g.add_edge(prev.as_str(), END);
    g
}

/// `START -> answer -> END`: one Paladin node ("Answerer" on `gpt-4o`,
/// prompt "Answer") writing the `LastWrite` field `answer`, under `aegis`.
pub fn one_paladin(aegis: Aegis) -> WarGraph {
    let answer = NodeSpec::paladin(
        Paladin::new("Answerer").with_model("gpt-4o"),
        InputMapping::new("Answer"),
        field_name("answer"),
    );
    let mut g = chain(
        schema(&[("answer", DispatchRule::LastWrite)]),
        vec![("answer", answer)],
    );
    g.set_aegis("answer", aegis);
    g
}

/// `fails` → `normally_next`, where `fails` fails permanently and its
/// Route handler writes the error into `err` and jumps to `compensate`
/// (which appends "compensated" to `path` and ends).
pub fn routed_to_compensate() -> WarGraph {
    let mut g = chain(
        schema(&[("path", DispatchRule::Append), ("err", DispatchRule::Merge)]),
        vec![
            ("fails", flaky(1, Transience::Permanent, counter(), "path")),
            ("normally_next", write("path", json!("static"))),
        ],
    );
    g.add_node("compensate", write("path", json!("compensated")))
        .add_edge("compensate", END)
        .set_aegis(
            "fails",
            Aegis::new().with_on_error(ErrorHandlerSpec::Route {
                to: NodeId::new("compensate"),
                error_field: field_name("err"),
            }),
        );
    g
}

/// The records of every waypoint of a thread, flattened.
pub async fn records(
    engine: &WarEngine<InMemoryWaypointStore>,
    thread: &str,
) -> Vec<NodeExecutionRecord> {
    engine
        .store()
        .history(thread)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|w| w.records)
        .collect()
}

/// The `answer` field of a run's final state (`null` when unset).
pub fn answer(outcome: &RunOutcome) -> Value {
    outcome
        .state()
        .get("answer")
        .cloned()
        .unwrap_or(Value::Null)
}

pub struct Evaluator<F>(pub F);

#[async_trait]
impl<F> EdgeConditionEvaluator for Evaluator<F>
where
    F: Fn(&Battlefield) -> Vec<NodeId> + Send + Sync + 'static,
{
    async fn evaluate(&self, state: &Battlefield) -> Result<Vec<NodeId>, StateNodeError> {
        Ok((self.0)(state))
    }
}
