//! The guide's compensation chain, declared with the DSL.
//!
//! `book` fails permanently (a declined card); its
//! `on_error(route = cancel, error_field = booking_error)` hands the
//! structured `NodeError` to `cancel`, which compensates. The same graph is
//! also built with the builder API, to show the two are one graph.
//!
//! Run: `cargo run --example dsl_compensation`

use aegis::graph::EngineLimits;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::trace::AttemptStatus;
use aegis::trace::TraceEvent;
use aegis::trace::TraceSink;
use serde_json::json;

/// Books the trip. A declined card is `Permanent`, so under the default
/// predicate (transient failures only) it gets exactly one attempt and the
/// handler runs at once, not after three wasted retries.
#[aegis(retry, on_error(route = cancel, error_field = booking_error))]
async fn book(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let traveller = state
        .get("traveller")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    Err(StateNodeError::permanent(format!(
        "card declined for {traveller}"
    )))
}

/// Compensates: reads the structured error `book`'s route wrote.
#[aegis]
async fn cancel(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let reason = state
        .get("booking_error")
        .map_or_else(|| "unknown".to_string(), ToString::to_string);
    let mut delta = StateDelta::new();
    delta.set("booking", format!("cancelled ({reason})"))?;
    Ok(delta)
}

fn dsl_graph() -> WarGraph {
    graph! {
        schema {
            traveller: LastWrite required,
            booking: LastWrite,
            // The error field: any dispatch but `Sum`.
            booking_error: LastWrite,
        }
        nodes { book, cancel }
        edges {
            START -> book -> END;
            cancel -> END;
        }
        // `cancel` has no edge into it: `book`'s route makes it reachable,
        // so it needs no `dynamic { .. }` marking.
    }
}

fn builder_graph() -> Result<WarGraph, Box<dyn std::error::Error>> {
    let booking_error = FieldName::new("booking_error")?;
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            FieldName::new("traveller")?,
            DispatchRule::LastWrite,
            None,
            true,
        ),
        FieldSpec::new(
            FieldName::new("booking")?,
            DispatchRule::LastWrite,
            None,
            false,
        ),
        FieldSpec::new(booking_error.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph.add_aegis_node(book {}).add_aegis_node(cancel {});
    graph.set_aegis(
        "book",
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_on_error(ErrorHandlerSpec::Route {
                to: NodeId::new("cancel"),
                error_field: booking_error,
            }),
    );
    graph
        .add_edge(START, "book")
        .add_edge("book", END)
        // Reachable through the route alone: no `mark_dynamic_target`.
        .add_edge("cancel", END);
    Ok(graph)
}

/// Prints each attempt as it happens.
struct PrintAttempts;

impl TraceSink for PrintAttempts {
    fn emit(&self, event: TraceEvent) {
        match event {
            TraceEvent::NodeFinished {
                node_id,
                attempt,
                status,
                ..
            } => match status {
                AttemptStatus::Succeeded => println!("  {node_id} attempt {attempt}: ok"),
                AttemptStatus::Failed(e) => println!("  {node_id} attempt {attempt}: {e}"),
                AttemptStatus::Skipped { reason } => {
                    println!("  {node_id} attempt {attempt}: skipped ({reason})");
                }
                other => println!("  {node_id} attempt {attempt}: {other:?}"),
            },
            TraceEvent::RetryScheduled {
                node_id,
                attempt,
                delay,
                ..
            } => println!("  {node_id}: attempt {attempt} in {delay:?}"),
            _ => {}
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = dsl_graph();
    println!(
        "graph! and the builder API build the same graph: {}",
        graph.fingerprint() == builder_graph()?.fingerprint()
    );
    println!(
        "book's Aegis: {:?}\n",
        graph.aegis_for(&NodeId::new("book"))
    );
    println!("{}", graph.to_mermaid());

    let engine = WarEngine::in_memory().with_trace_sink(PrintAttempts);
    println!("running:");
    let outcome = engine
        .start(&graph, "trip-1", json!({"traveller": "Ada"}))
        .await?;
    println!("outcome: {}", outcome.name());
    // Completed, but not clean: the outcome lists what its handlers caught.
    for h in outcome.handled() {
        println!(
            "handled: `{}` by {}: {}",
            h.node_id,
            h.handler.name(),
            h.error
        );
    }
    if let Some(error) = outcome.node_error() {
        println!("node error: {error}");
    }
    for field in ["booking", "booking_error"] {
        let value = outcome
            .state()
            .get(field)
            .map_or_else(|| "(unset)".into(), ToString::to_string);
        println!("{field} = {value}");
    }
    Ok(())
}
