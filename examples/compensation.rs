//! The guide's compensation chain: `book` asks a provider that rejects its
//! credential (a permanent failure), so under the default retry policy it
//! runs exactly once; its Route handler writes the structured error into
//! `booking_error` and `cancel` runs next, reading it.
//!
//! Run it with `cargo run --example compensation`.

use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use serde_json::json;
use std::sync::Arc;

/// Reads the booking error and records a cancellation.
struct Cancel;

#[async_trait]
impl StateNode for Cancel {
    fn kind_name(&self) -> &str {
        "cancel"
    }

    async fn run(&self, state: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        let error: NodeError =
            serde_json::from_value(state.get("booking_error").cloned().unwrap_or_default())?;
        let mut delta = StateDelta::new();
        delta.set(
            "booking",
            format!(
                "cancelled: `{}` failed ({}) on attempt {}",
                error.node_id, error.transience, error.attempt
            ),
        )?;
        Ok(delta.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = Arc::new(
        MockLlmAdapter::new()
            .with_provider_name("openai")
            .with_error(LlmError::AuthenticationError("invalid api key".into())),
    );
    let booking = FieldName::new("booking")?;
    let booking_error = FieldName::new("booking_error")?;
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(booking.clone(), DispatchRule::LastWrite, None, false),
        FieldSpec::new(booking_error.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node(
            "book",
            NodeSpec::paladin(
                Paladin::new("Booker").with_model("gpt-4o"),
                InputMapping::new("Book the flight"),
                booking,
            ),
        )
        // Reachable only through the route: eligible by declaration.
        .add_node("cancel", NodeSpec::function(Cancel))
        .add_edge(START, "book")
        .add_edge("book", END)
        .add_edge("cancel", END)
        .set_aegis(
            "book",
            Aegis::new()
                .with_retry(RetryPolicy::default())
                .with_on_error(ErrorHandlerSpec::Route {
                    to: NodeId::new("cancel"),
                    error_field: booking_error,
                }),
        );

    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone()).with_llm(provider.clone());
    let state = engine
        .start(&graph, "trip-42", json!({}))
        .await?
        .into_result()?;

    println!(
        "provider calls: {} (a rejected credential is never retried)",
        provider.call_count()
    );
    println!(
        "booking: {}",
        state.get("booking").cloned().unwrap_or_default()
    );
    println!("\nwaypoint history of trip-42:");
    for w in store.history("trip-42").await? {
        let nodes: Vec<String> = w
            .records
            .iter()
            .map(|r| format!("{} {:?} (attempt {})", r.node_id, r.status, r.attempt))
            .collect();
        println!(
            "  #{} superstep {} {:<9} {}",
            w.seq,
            w.superstep,
            w.status.name(),
            nodes.join(", ")
        );
    }
    Ok(())
}
