//! Engine bugs the chaos suite found, each pinned by the smallest graph
//! that shows it (the chaos seed that found it is named).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::engine::CancellationToken;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use serde_json::json;
use std::time::Duration;

/// Chaos seed 15: cancellation suspended an attempt's idle window. An
/// attempt that stalls past its `idle_timeout` inside the shutdown grace
/// must still be cut (`Timeout(Idle)`), never merged as if it had
/// succeeded: the wall clock was enforced during the grace, the idle
/// window was not.
#[tokio::test(start_paused = true)]
async fn the_idle_window_still_cuts_an_attempt_inside_the_shutdown_grace() {
    let log = FieldName::new("log").unwrap();
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        log.clone(),
        DispatchRule::Append,
        None,
        false,
    )]);
    // 300 ms of work without a single beat, under a 250 ms idle window.
    let stalled = NodeSpec::from_fn("stalled", |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut delta = StateDelta::new();
            delta.set("log", "stalled work merged")?;
            Ok(delta.into())
        })
    });
    let mut graph = WarGraph::new(
        schema,
        EngineLimits::default().with_shutdown_grace(Duration::from_secs(5)),
    );
    graph
        .add_node("stalled", stalled)
        .add_edge(START, "stalled")
        .add_edge("stalled", END)
        .set_aegis(
            "stalled",
            Aegis::new().with_timeout(TimeoutPolicy::idle(Duration::from_millis(250))),
        );
    let token = CancellationToken::new();
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_cancellation(token.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });

    let t0 = tokio::time::Instant::now();
    let out = engine.start(&graph, "t", json!({})).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_millis(250));
    let error = out
        .node_error()
        .unwrap_or_else(|| panic!("the idle window must cut the attempt: {out:?}"));
    assert_eq!(error.source, NodeErrorSource::Timeout(TimeoutKind::Idle));
    assert_eq!(out.state().get("log"), Some(&json!([])));
}
