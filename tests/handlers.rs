//! Error handlers and compensation: Route, Absorb and Custom run on a node's
//! final failure only, and validation checks their wiring.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::ErrorHandler;
use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::waypoint::NodeStatus;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

fn route(to: &str, field: &str) -> ErrorHandlerSpec {
    ErrorHandlerSpec::Route {
        to: NodeId::new(to),
        error_field: FieldName::new(field).unwrap(),
    }
}

fn absorb(pairs: &[(&str, serde_json::Value)]) -> ErrorHandlerSpec {
    ErrorHandlerSpec::Absorb {
        fallback_delta: delta(pairs),
    }
}

fn quick_retry(max_attempts: u32) -> Option<RetryPolicy> {
    Some(
        RetryPolicy::default()
            .with_max_attempts(max_attempts)
            .with_initial_interval(Duration::ZERO),
    )
}

/// The guide's compensation chain: `book` calls a provider that rejects its
/// credential; `cancel` runs next and reads `booking_error`.
#[tokio::test]
async fn the_compensation_chain_runs_cancel_after_one_attempt() {
    let llm = Arc::new(
        MockLlmAdapter::new()
            .with_provider_name("openai")
            .with_error(LlmError::AuthenticationError("invalid api key".into())),
    );
    let port = Arc::new(PaladinExecutionService::new(llm.clone()));
    let seen = Arc::new(std::sync::Mutex::new(None));
    let cancel = {
        let seen = seen.clone();
        NodeSpec::from_fn("cancel", move |state, _| {
            *seen.lock().unwrap() = state.get("booking_error").cloned();
            Box::pin(async { Ok(delta(&[("booking", json!("cancelled"))]).into()) })
        })
    };
    let mut g = WarGraph::new(
        schema(&[("booking", LastWrite), ("booking_error", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "book",
        NodeSpec::paladin(
            Paladin::new("Booker").with_model("gpt-4o"),
            InputMapping::new("Book the flight"),
            FieldName::new("booking").unwrap(),
        ),
    )
    .add_node("cancel", cancel)
    .add_edge(START, "book")
    .add_edge("book", END)
    .add_edge("cancel", END)
    .set_aegis(
        "book",
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_on_error(route("cancel", "booking_error")),
    );
    // `cancel` is reachable only through the route: no dynamic marking needed.
    g.validate().unwrap();

    let e = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);
    let state = run_to_state(&e, &g, "trip", json!({})).await;
    assert_eq!(llm.call_count(), 1, "a permanent failure takes one attempt");
    assert_eq!(state.get("booking"), Some(&json!("cancelled")));
    let written: NodeError = serde_json::from_value(seen.lock().unwrap().clone().unwrap()).unwrap();
    assert_eq!(written.node_id.as_str(), "book");
    assert_eq!(written.transience, Transience::Permanent);
    assert!(matches!(
        written.source,
        NodeErrorSource::Llm {
            status: Some(401),
            ..
        }
    ));
    assert_eq!(state.get("booking_error").unwrap()["attempt"], json!(1));

    let rec = records(&e, "trip").await;
    let book = rec.iter().find(|r| r.node_id.as_str() == "book").unwrap();
    assert_eq!(
        book.status,
        NodeStatus::Failed,
        "the node did fail; the handler chose what next"
    );
}

#[tokio::test]
async fn the_handler_never_runs_while_retries_remain() {
    let attempts = counter();
    let mut g = chain(
        schema(&[("out", LastWrite)]),
        vec![(
            "n",
            flaky(2, Transience::Transient, attempts.clone(), "out"),
        )],
    );
    g.set_aegis(
        "n",
        Aegis::new()
            .with_retry(quick_retry(3))
            .with_on_error(absorb(&[("out", json!("fallback"))])),
    );
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("out"), Some(&json!("ok")));
    assert_eq!(count(&attempts), 3);
}

#[tokio::test]
async fn absorb_merges_its_delta_and_follows_the_static_edges() {
    let attempts = counter();
    let mut g = chain(
        schema(&[("summary", LastWrite), ("after", LastWrite)]),
        vec![
            (
                "summarize",
                flaky(9, Transience::Transient, attempts.clone(), "summary"),
            ),
            ("next", write("after", json!(true))),
        ],
    );
    g.set_aegis(
        "summarize",
        Aegis::new()
            .with_retry(quick_retry(3))
            .with_on_error(absorb(&[("summary", json!("unavailable"))])),
    );
    let e = engine();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(count(&attempts), 3, "retries exhausted first");
    assert_eq!(state.get("summary"), Some(&json!("unavailable")));
    assert_eq!(state.get("after"), Some(&json!(true)));
    let rec = records(&e, "t").await;
    assert_eq!(rec[0].status, NodeStatus::Failed);
    assert_eq!(rec[0].attempt, 3);
}

#[tokio::test]
async fn route_replaces_the_static_successors() {
    let g = routed_to_compensate();
    let state = run_to_state(&engine(), &g, "t", json!({})).await;
    assert_eq!(state.get("path"), Some(&json!(["compensated"])));
    assert_eq!(state.get("err").unwrap()["node_id"], json!("fails"));
}

struct EndTheRun;

#[async_trait]
impl ErrorHandler for EndTheRun {
    async fn handle(&self, err: &NodeError, state: &Battlefield) -> Result<Directive, NodeError> {
        let mut d = StateDelta::new();
        d.set(
            "note",
            format!("{} failed; saw {:?}", err.node_id, state.get("note")),
        )
        .unwrap();
        Ok(Directive::end(d))
    }
}

struct Refuses;

#[async_trait]
impl ErrorHandler for Refuses {
    async fn handle(&self, err: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        let mut refused = err.clone();
        refused.source = NodeErrorSource::Function {
            message: "escalation desk closed".into(),
        };
        Err(refused)
    }
}

#[tokio::test]
async fn custom_handlers_decide_and_their_own_failure_fails_the_run() {
    let mut g = chain(
        schema(&[("note", LastWrite), ("after", LastWrite)]),
        vec![
            ("n", flaky(9, Transience::Permanent, counter(), "note")),
            ("after", write("after", json!(1))),
        ],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_on_error(ErrorHandlerSpec::Custom("escalate".into())),
    );
    let err = engine()
        .start(&g, "t", json!({"note": "before"}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::UnregisteredErrorHandler { ref offenders } if offenders[0].reason.contains("escalate"))
    );

    let e = engine().with_error_handler("escalate", Arc::new(EndTheRun));
    let state = run_to_state(&e, &g, "t", json!({"note": "before"})).await;
    // It saw the state before the superstep, and ended the branch.
    assert_eq!(
        state.get("note"),
        Some(&json!("n failed; saw Some(String(\"before\"))"))
    );
    assert_eq!(state.get("after"), None);

    let e = engine().with_error_handler("escalate", Arc::new(Refuses));
    let out = e.start(&g, "t", json!({})).await.unwrap();
    let ne = out.node_error().unwrap();
    assert!(
        matches!(&ne.source, NodeErrorSource::Function { message } if message == "escalation desk closed")
    );
}

#[tokio::test]
async fn a_compensation_loop_ends_at_the_visit_limit() {
    let mut g = WarGraph::new(
        schema(&[("err", LastWrite), ("out", LastWrite)]),
        EngineLimits::default().with_max_node_visits(4),
    );
    g.add_node("a", flaky(99, Transience::Permanent, counter(), "out"))
        .add_node("b", flaky(99, Transience::Permanent, counter(), "out"))
        .add_edge(START, "a")
        .add_edge("a", END)
        .add_edge("b", END)
        .set_aegis("a", Aegis::new().with_on_error(route("b", "err")))
        .set_aegis("b", Aegis::new().with_on_error(route("a", "err")));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::NodeVisitLimitExceeded { limit: 4, .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn no_handler_runs_when_the_run_budget_is_gone() {
    let slow = NodeSpec::from_fn("slow", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(StateDelta::new().into())
        })
    });
    let mut g = chain(schema(&[("out", LastWrite)]), vec![("slow", slow)]);
    g.set_aegis(
        "slow",
        Aegis::new().with_on_error(absorb(&[("out", json!("absorbed"))])),
    );
    g.set_limits(EngineLimits::default().with_run_timeout(Duration::from_secs(1)));
    let out = engine().start(&g, "t", json!({})).await.unwrap();
    assert!(matches!(
        out.into_result(),
        Err(EngineError::RunTimeoutExceeded { .. })
    ));
}

#[test]
fn handler_validation_lists_every_offender() {
    let mut g = chain(
        schema(&[("total", Sum), ("obj", Merge), ("ok", LastWrite)]),
        vec![
            ("a", write("ok", json!(1))),
            ("b", write("ok", json!(1))),
            ("c", write("ok", json!(1))),
            ("d", write("ok", json!(1))),
        ],
    );
    g.set_aegis("a", Aegis::new().with_on_error(route("ghost", "missing")))
        .set_aegis("b", Aegis::new().with_on_error(route("nowhere", "total")))
        .set_aegis(
            "c",
            Aegis::new().with_on_error(absorb(&[
                ("undeclared", json!(1)),
                ("total", json!("x")),
                ("obj", json!(3)),
            ])),
        )
        .set_aegis("d", Aegis::new().with_on_error(route("a", "obj")));
    let err = g.validate().unwrap_err();
    let errs = err.validation_errors();
    let offenders = |name: &str| -> Vec<String> {
        errs.iter()
            .find(|e| format!("{e:?}").starts_with(name))
            .map(|e| match e {
                EngineError::RouteTargetUnknown { offenders }
                | EngineError::RouteErrorFieldUndeclared { offenders }
                | EngineError::RouteErrorFieldDispatchInvalid { offenders }
                | EngineError::AbsorbDeltaSchemaInvalid { offenders } => {
                    offenders.iter().map(|o| o.to_string()).collect()
                }
                _ => vec![],
            })
            .unwrap_or_else(|| panic!("no {name} in {err}"))
    };
    assert_eq!(offenders("RouteTargetUnknown").len(), 2);
    assert_eq!(
        offenders("RouteErrorFieldUndeclared"),
        ["`a`: error field `missing` is not declared"]
    );
    assert_eq!(offenders("RouteErrorFieldDispatchInvalid").len(), 1);
    let absorb = offenders("AbsorbDeltaSchemaInvalid");
    assert_eq!(absorb.len(), 3, "{absorb:?}");
    // `d`'s route to `a` with a Merge field is fine.
    assert!(!err.to_string().contains("`d`"));
}
