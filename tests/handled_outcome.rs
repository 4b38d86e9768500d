//! A run's outcome and final waypoint list the failures whose `on_error`
//! handler ran, so a compensated completion is told from a clean one without
//! reading application fields.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::ErrorHandler;
use aegis::error::NodeErrorSource;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::waypoint::HandlerKind;
use aegis::waypoint::Waypoint;
use aegis::waypoint::WaypointStatus;
use serde_json::json;
use std::sync::Arc;
use support::fixtures::*;

async fn final_waypoint(e: &WarEngine<InMemoryWaypointStore>, thread: &str) -> Waypoint {
    e.store().latest(thread).await.unwrap().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_clean_run_lists_nothing_handled() {
    let g = chain(
        schema(&[("out", LastWrite)]),
        vec![("n", write("out", json!(1)))],
    );
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert!(out.is_completed());
    assert!(out.handled().is_empty());
    assert!(out.is_clean());
    let w = final_waypoint(&e, "t").await;
    assert_eq!(w.status, WaypointStatus::Completed);
    assert!(w.handled.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_routed_failure_is_listed_with_its_error_and_target() {
    let g = routed_to_compensate();
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert!(out.is_completed());
    assert!(!out.is_clean(), "completed, but compensated");
    assert!(out.node_error().is_none(), "the run itself did not fail");
    let handled = out.handled();
    assert_eq!(handled.len(), 1, "{handled:?}");
    let h = &handled[0];
    assert_eq!(h.node_id.as_str(), "fails");
    assert_eq!(h.task_key, None);
    assert_eq!(h.superstep, 1);
    assert_eq!(
        h.handler,
        HandlerKind::Route {
            to: NodeId::new("compensate")
        }
    );
    assert_eq!(h.handler.name(), "route");
    assert_eq!(h.error.node_id.as_str(), "fails");
    assert_eq!(h.error.transience, Transience::Permanent);
    // The same error the route wrote into the state.
    let written: NodeError =
        serde_json::from_value(out.state().get("err").unwrap().clone()).unwrap();
    assert_eq!(written, h.error);
    // The final waypoint, written two supersteps later, still lists it.
    let w = final_waypoint(&e, "t").await;
    assert_eq!(w.status, WaypointStatus::Completed);
    assert_eq!(w.superstep, 2);
    assert_eq!(w.handled, handled);
}

#[tokio::test(start_paused = true)]
async fn an_absorbed_task_failure_is_listed_with_its_task_key() {
    let split = NodeSpec::from_fn("split", |_, _| {
        Box::pin(async {
            let tasks = (0..3).map(|i| (format!("t{i}"), json!(i)));
            Ok(Directive::muster(StateDelta::new(), "worker", tasks))
        })
    });
    let worker = NodeSpec::from_fn("worker", |_, ctx| {
        let task = ctx.task().cloned().unwrap();
        Box::pin(async move {
            if task.task_key == "t1" {
                return Err(StateNodeError::with_transience(
                    "no answer",
                    Transience::Permanent,
                ));
            }
            Ok(delta(&[("items", json!(task.task_key))]).into())
        })
    });
    let mut g = WarGraph::new(schema(&[("items", Append)]), EngineLimits::default());
    g.add_node("split", split)
        .add_worker_template("worker", worker)
        .add_node("collect", write("items", json!("collected")))
        .add_edge(START, "split")
        .add_edge("worker", "collect")
        .add_edge("collect", END)
        .set_aegis(
            "worker",
            Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
                fallback_delta: delta(&[("items", json!("fallback"))]),
            }),
        );
    let e = engine();
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        out.state().get("items"),
        Some(&json!(["t0", "fallback", "t2", "collected"]))
    );
    let handled = out.handled();
    assert_eq!(handled.len(), 1, "{handled:?}");
    assert_eq!(handled[0].node_id.as_str(), "worker");
    assert_eq!(handled[0].task_key.as_deref(), Some("t1"));
    assert_eq!(handled[0].handler, HandlerKind::Absorb);
    assert!(matches!(
        &handled[0].error.source,
        NodeErrorSource::Function { message } if message == "no answer"
    ));
    assert_eq!(final_waypoint(&e, "t").await.handled, handled);
}

struct EndTheRun;

#[async_trait]
impl ErrorHandler for EndTheRun {
    async fn handle(&self, _: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        Ok(Directive::end(delta(&[("note", json!("escalated"))])))
    }
}

#[tokio::test(start_paused = true)]
async fn a_custom_handler_is_listed_by_its_name() {
    let mut g = chain(
        schema(&[("note", LastWrite)]),
        vec![("n", flaky(9, Transience::Transient, counter(), "note"))],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_on_error(ErrorHandlerSpec::Custom("escalate".into())),
    );
    let e = engine().with_error_handler("escalate", Arc::new(EndTheRun));
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(out.state().get("note"), Some(&json!("escalated")));
    let handled = out.handled();
    assert_eq!(handled.len(), 1, "{handled:?}");
    assert_eq!(
        handled[0].handler,
        HandlerKind::Custom {
            name: "escalate".into()
        }
    );
    assert_eq!(handled[0].handler.name(), "custom");
    assert_eq!(handled[0].error.transience, Transience::Transient);
    assert_eq!(final_waypoint(&e, "t").await.handled, handled);
}

/// A handler whose own failure fails the run lists nothing: it did not
/// handle anything.
struct Refuses;

#[async_trait]
impl ErrorHandler for Refuses {
    async fn handle(&self, err: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        Err(err.clone())
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_fails_lists_nothing() {
    let mut g = chain(
        schema(&[("note", LastWrite)]),
        vec![("n", flaky(9, Transience::Permanent, counter(), "note"))],
    );
    g.set_aegis(
        "n",
        Aegis::new().with_on_error(ErrorHandlerSpec::Custom("refuse".into())),
    );
    let e = engine().with_error_handler("refuse", Arc::new(Refuses));
    let out = e.start(&g, "t", json!({})).await.unwrap();
    assert!(out.node_error().is_some());
    assert!(out.handled().is_empty());
    assert!(final_waypoint(&e, "t").await.handled.is_empty());
}
