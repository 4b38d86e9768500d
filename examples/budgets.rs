//! Budgets in tokens and money: a run whose retry is skipped because it
//! would cost more than is left (its handler runs instead), and a fallback
//! hop skipped because the prompt cannot fit the provider's context window.
//! Each prints its `skipped` line and what the run spent.
//!
//! Mock providers report scripted usage; no network. Run it with
//! `cargo run --example budgets`.

use aegis::error::LlmError;
use aegis::graph::{EngineLimits, InputMapping, NodeSpec};
use aegis::llm::{FallbackLlmAdapter, LlmChunk, LlmPort, LlmUsage, MockLlmAdapter};
use aegis::paladin::Paladin;
use aegis::policy::{ErrorHandlerSpec, Money, Price, PriceTable, SpendBudget};
use aegis::prelude::*;
use aegis::trace::{TraceEvent, TraceSink};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Prints the skips and the run's spend as they happen.
struct Printer;

impl TraceSink for Printer {
    fn emit(&self, event: TraceEvent) {
        // The engine reports every skip with its run; the chain's own
        // report (without one) would print it twice.
        match &event {
            TraceEvent::StepSkipped {
                thread_id: Some(_), ..
            }
            | TraceEvent::RunSpend { .. } => println!("{event}"),
            _ => {}
        }
    }
}

/// `START -> writer -> END`: a Paladin writing `answer`, retried up to three
/// times, its final failure absorbed into a canned answer.
fn graph() -> Result<WarGraph, Box<dyn std::error::Error>> {
    let question = FieldName::new("question")?;
    let answer = FieldName::new("answer")?;
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(question, DispatchRule::LastWrite, None, false),
        FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut delta = StateDelta::new();
    delta.set(&answer, json!("(no answer within budget)"))?;
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node(
            "writer",
            NodeSpec::paladin(
                Paladin::new("Writer").with_model("gpt-4o-mini"),
                InputMapping::new("Answer briefly: {question}"),
                answer,
            ),
        )
        .add_edge(START, "writer")
        .add_edge("writer", END);
    graph.set_aegis(
        "writer",
        Aegis::new()
            .with_retry(
                RetryPolicy::default()
                    .with_max_attempts(3)
                    .with_initial_interval(Duration::from_millis(10)),
            )
            .with_on_error(ErrorHandlerSpec::Absorb {
                fallback_delta: delta,
            }),
    );
    Ok(graph)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = graph()?;
    let prices = PriceTable::new()
        .with_price("openai", "gpt-4o-mini", Price::per_million(0.15, 0.60)?)
        .with_provider_price("local", Price::default());

    // 1. Money: the first attempt streams 4,000 tokens in and 1,000 out
    //    (1.2 thousandths of a dollar), then the connection resets. With
    //    2 thousandths budgeted, a retry expected to cost as much again
    //    does not fit: it is skipped and the handler answers.
    let openai = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_stream(vec![
            Ok(LlmChunk::text("Par").with_usage(LlmUsage::new(4_000, 1_000))),
            Err(LlmError::NetworkError("connection reset".into())),
        ]);
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(openai.clone())
        .with_prices(prices.clone())
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.002)?))
        .with_trace_sink(Printer);
    let outcome = engine
        .start(
            &graph,
            "money",
            json!({"question": "the capital of France?"}),
        )
        .await?;
    println!(
        "money: {} after {} call(s), answer {}",
        outcome.name(),
        openai.call_count(),
        outcome.state().get("answer").cloned().unwrap_or_default()
    );

    // 2. Context: a small local model declares a 512-token window; the
    //    prompt (about 750 tokens) cannot fit, so the chain skips it unsent
    //    and the hosted model answers.
    let local = MockLlmAdapter::new()
        .with_provider_name("local")
        .with_context_window(512);
    let hosted = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_llm_response(
            aegis::llm::LlmResponse::text("Paris.").with_usage(LlmUsage::new(760, 3)),
        );
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(local.clone()) as Arc<dyn LlmPort>,
        Arc::new(hosted),
    ])?;
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain)
        .with_prices(prices)
        .with_trace_sink(Printer);
    let long_question = "the capital of France? ".repeat(130);
    let outcome = engine
        .start(&graph, "context", json!({ "question": long_question }))
        .await?;
    println!(
        "context: {}, {} call(s) to the local model, answer {}",
        outcome.name(),
        local.call_count(),
        outcome.state().get("answer").cloned().unwrap_or_default()
    );
    Ok(())
}
