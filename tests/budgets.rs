//! Spend budgets (issue 40): usage per attempt from the providers' counts
//! (failed and abandoned attempts included, estimates marked), prices and
//! costs, retries and hops skipped for money, a run that runs out, context
//! windows and the opt-in hop on authentication failures. Scripted usage on
//! mock providers, all on the paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmChunk;
use aegis::llm::LlmPort;
use aegis::llm::LlmUsage;
use aegis::llm::MockLlmAdapter;
use aegis::llm::MockStreamStep;
use aegis::paladin::Paladin;
use aegis::policy::{
    ErrorHandlerSpec, Money, Price, PriceTable, SkipReason, SkippedStep, Spend, SpendBudget,
};
use aegis::prelude::*;
use aegis::trace::{CollectingTraceSink, TraceEvent};
use aegis::waypoint::NodeExecutionRecord;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

/// 1 $ per million tokens in, 2 $ out, for every model of `provider`.
fn prices(provider: &str) -> PriceTable {
    PriceTable::new().with_provider_price(provider, Price::per_million(1.0, 2.0).unwrap())
}

fn usage_chunk(text: &str, prompt: u64, completion: u64) -> Result<LlmChunk, LlmError> {
    Ok(LlmChunk::text(text).with_usage(LlmUsage::new(prompt, completion)))
}

fn reset() -> LlmError {
    LlmError::NetworkError("connection reset".into())
}

/// `START -> writer -> END`, writer a Paladin writing `answer`; with
/// `handler` absorbing its failure into `answer = "handled"`.
fn graph(aegis: Aegis, limits: EngineLimits) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        limits,
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("Answer: {question}"),
            field_name("answer"),
        ),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    g.set_aegis("writer", aegis);
    g
}

fn handled() -> ErrorHandlerSpec {
    ErrorHandlerSpec::Absorb {
        fallback_delta: delta(&[("answer", json!("handled"))]),
    }
}

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_initial_interval(Duration::from_millis(10))
        .with_jitter(false)
}

async fn writer_record(engine: &WarEngine, thread: &str) -> NodeExecutionRecord {
    records(engine, thread)
        .await
        .into_iter()
        .find(|r| r.node_id.as_str() == "writer")
        .expect("a writer record")
}

// ---- usage and cost per attempt -----------------------------------------

#[tokio::test(start_paused = true)]
async fn each_attempt_records_the_providers_usage_and_its_cost_failed_ones_too() {
    // Attempt 1 streams 1000 in / 500 out, then the connection resets;
    // attempt 2 answers with 800 in / 200 out.
    let llm = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_stream(vec![usage_chunk("partial", 1000, 500), Err(reset())])
        .with_stream(vec![usage_chunk("done", 800, 200)]);
    let sink = CollectingTraceSink::new();
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm)
        .with_prices(prices("openai"))
        .with_trace_sink(sink.clone());
    let g = graph(Aegis::new().with_retry(retry(2)), EngineLimits::default());
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("done"));

    let record = writer_record(&engine, "t").await;
    // 1000 * 1 $/M + 500 * 2 $/M = 0.002 $; 800 + 400 = 0.0012 $.
    let first = record.attempts[0]
        .spend
        .expect("the failed attempt's spend");
    assert_eq!((first.prompt_tokens, first.completion_tokens), (1000, 500));
    assert_eq!(first.cost, Money::from_nano_usd(2_000_000));
    assert!(!first.estimated);
    let total = record.spend().expect("the activation's spend");
    assert_eq!(total.total_tokens(), 2500);
    assert_eq!(total.cost, Money::from_nano_usd(3_200_000));

    let events = sink.events();
    let per_attempt: Vec<Spend> = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::AttemptSpend { spend, .. } => Some(*spend),
            _ => None,
        })
        .collect();
    assert_eq!(per_attempt.len(), 2);
    let run = events
        .iter()
        .find_map(|e| match e {
            TraceEvent::RunSpend { spend, .. } => Some(*spend),
            _ => None,
        })
        .expect("the run's spend");
    assert_eq!(run.cost, Money::from_nano_usd(3_200_000));
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_stream_counts_what_it_streamed_as_an_estimate() {
    // Two 8-character chunks, then silence past the idle window: the
    // provider never reports usage.
    let llm = MockLlmAdapter::new().with_stream_steps(vec![
        MockStreamStep::Item(Ok(LlmChunk::text("abcdefgh"))),
        MockStreamStep::Item(Ok(LlmChunk::text("ijklmnop"))),
        MockStreamStep::Stall,
    ]);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm);
    let g = graph(
        Aegis::new().with_timeout(TimeoutPolicy::idle(Duration::from_secs(1))),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert!(!outcome.is_completed());
    let record = writer_record(&engine, "t").await;
    let spend = record.attempts[0]
        .spend
        .expect("the abandoned attempt's spend");
    assert!(spend.estimated, "no usage was reported: {spend:?}");
    assert_eq!(spend.completion_tokens, 4, "16 characters streamed");
    assert!(spend.prompt_tokens > 0, "the prompt is estimated too");
}

// ---- money budgets --------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_retry_whose_expected_cost_passes_what_is_left_is_skipped_and_the_handler_runs() {
    // Attempt 1 costs 0.002 $ and fails; 0.003 $ was the budget, so 0.001 $
    // is left: a retry expected to cost 0.002 $ is not sent.
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("partial", 1000, 500), Err(reset())])
        .with_response("never sent");
    let sink = CollectingTraceSink::new();
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm.clone())
        .with_prices(prices("mock"))
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.003).unwrap()))
        .with_trace_sink(sink.clone());
    let g = graph(
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(llm.call_count(), 1, "the retry was not sent");

    let record = writer_record(&engine, "t").await;
    let skip = &record.skips()[0];
    assert_eq!(skip.step, SkippedStep::Retry { attempt: 2 });
    let SkipReason::SpendBudget {
        expected,
        remaining,
    } = &skip.reason
    else {
        panic!("not a spend skip: {skip:?}");
    };
    assert_eq!(expected.cost, Money::from_nano_usd(2_000_000));
    assert_eq!(remaining.cost, Some(Money::from_nano_usd(1_000_000)));
    let line = sink
        .events()
        .iter()
        .find(|e| matches!(e, TraceEvent::StepSkipped { .. }))
        .map(ToString::to_string)
        .expect("a StepSkipped event");
    assert!(
        line.contains("skipped") && line.contains("spend budget"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_fits_the_budget_is_sent() {
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("partial", 1000, 500), Err(reset())])
        .with_response("second");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm.clone())
        .with_prices(prices("mock"))
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.004).unwrap()));
    let g = graph(
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("second"));
    assert_eq!(llm.call_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_run_that_spends_its_whole_budget_ends_with_its_own_terminal_reason() {
    // The graph's default budget: 1500 tokens, all spent by attempt 1.
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("partial", 1000, 500), Err(reset())])
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm.clone());
    let g = graph(
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
        EngineLimits::default().with_spend_budget(SpendBudget::new().with_max_tokens(1500)),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    match outcome.into_result() {
        Err(EngineError::SpendBudgetExhausted { spent, budget }) => {
            assert_eq!(spent.total_tokens(), 1500);
            assert_eq!(budget.max_tokens, Some(1500));
        }
        other => panic!("expected SpendBudgetExhausted, got {other:?}"),
    }
    assert_eq!(llm.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_next_model_call_after_the_budget_ran_out_is_not_sent() {
    // Two Paladin nodes in a row; the first spends the whole budget.
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("one", 60, 40)])
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm.clone())
        .with_spend_budget(SpendBudget::new().with_max_tokens(100));
    let mut g = WarGraph::new(
        schema(&[
            ("question", LastWrite),
            ("answer", LastWrite),
            ("second", LastWrite),
        ]),
        EngineLimits::default(),
    );
    let paladin = |field: &str| {
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("Answer: {question}"),
            field_name(field),
        )
    };
    g.add_node("first", paladin("answer"))
        .add_node("second", paladin("second"));
    g.add_edge(START, "first")
        .add_edge("first", "second")
        .add_edge("second", END);
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert!(matches!(
        outcome.into_result(),
        Err(EngineError::SpendBudgetExhausted { .. })
    ));
    assert_eq!(llm.call_count(), 1, "the second node's call was refused");
}

#[tokio::test(start_paused = true)]
async fn a_node_cap_skips_its_retry_under_a_larger_run_budget() {
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("partial", 300, 100), Err(reset())])
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm.clone())
        .with_spend_budget(SpendBudget::new().with_max_tokens(1_000_000));
    let g = graph(
        Aegis::new()
            .with_retry(retry(3))
            .with_on_error(handled())
            .with_spend_cap(SpendBudget::new().with_max_tokens(600)),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(llm.call_count(), 1);
    let record = writer_record(&engine, "t").await;
    assert!(matches!(
        &record.skips()[0].reason,
        SkipReason::SpendBudget { remaining, .. } if remaining.tokens == Some(200)
    ));
}

// ---- fallback hops --------------------------------------------------------

fn chain(ports: Vec<Arc<dyn LlmPort>>) -> FallbackLlmAdapter {
    FallbackLlmAdapter::new(ports).unwrap()
}

fn unavailable() -> LlmError {
    LlmError::ProviderError {
        provider: "primary".into(),
        status: 503,
        message: "busy".into(),
        retry_after: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_over_a_providers_context_window_skips_it_unsent() {
    let small = MockLlmAdapter::new()
        .with_provider_name("small")
        .with_context_window(10);
    let large = MockLlmAdapter::new()
        .with_provider_name("large")
        .with_context_window(100_000)
        .with_response("from large");
    let sink = CollectingTraceSink::new();
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![
            Arc::new(small.clone()),
            Arc::new(large.clone()),
        ]))
        .with_trace_sink(sink.clone());
    let g = graph(Aegis::new(), EngineLimits::default());
    let question = "x".repeat(200);
    let outcome = engine
        .start(&g, "t", json!({ "question": question }))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("from large"));
    assert_eq!(small.call_count(), 0, "never sent to the small model");
    let record = writer_record(&engine, "t").await;
    assert_eq!(
        record.skips()[0].step,
        SkippedStep::Hop {
            provider: "small".into(),
            position: 0
        }
    );
    assert!(matches!(
        record.skips()[0].reason,
        SkipReason::ContextWindow { window: 10, estimated_tokens } if estimated_tokens > 50
    ));
    let line = sink
        .events()
        .iter()
        .find(|e| matches!(e, TraceEvent::StepSkipped { .. }))
        .map(ToString::to_string)
        .unwrap();
    assert!(
        line.contains("skipped") && line.contains("context window"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lone_provider_refuses_a_request_over_its_window() {
    let small = MockLlmAdapter::new().with_context_window(10);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(small.clone());
    let g = graph(Aegis::new(), EngineLimits::default());
    let outcome = engine
        .start(&g, "t", json!({ "question": "x".repeat(200) }))
        .await
        .unwrap();
    assert!(!outcome.is_completed());
    assert_eq!(small.call_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hop_whose_expected_cost_passes_what_is_left_is_skipped_and_the_handler_runs() {
    let primary = MockLlmAdapter::new()
        .with_provider_name("cheap")
        .with_error(unavailable());
    let backup = MockLlmAdapter::new()
        .with_provider_name("dear")
        .with_response("never sent");
    let prices = PriceTable::new()
        .with_provider_price("cheap", Price::per_million(1.0, 1.0).unwrap())
        .with_provider_price("dear", Price::per_million(1000.0, 1000.0).unwrap());
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![Arc::new(primary), Arc::new(backup.clone())]))
        .with_prices(prices)
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.001).unwrap()));
    let g = graph(
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(backup.call_count(), 0);
    let record = writer_record(&engine, "t").await;
    assert!(matches!(
        &record.skips()[0],
        s if matches!(&s.step, SkippedStep::Hop { provider, position: 1 } if provider == "dear")
            && matches!(s.reason, SkipReason::SpendBudget { .. })
    ));
    // The skip is Permanent: no retry of the whole chain.
    assert_eq!(record.attempt, 1);
}

#[tokio::test(start_paused = true)]
async fn a_hop_to_a_model_dearer_than_the_ratio_allows_is_refused() {
    let primary = MockLlmAdapter::new()
        .with_provider_name("cheap")
        .with_error(unavailable());
    let backup = MockLlmAdapter::new()
        .with_provider_name("dear")
        .with_response("never sent");
    let prices = PriceTable::new()
        .with_provider_price("cheap", Price::per_million(1.0, 1.0).unwrap())
        .with_provider_price("dear", Price::per_million(3.0, 3.0).unwrap());
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![Arc::new(primary), Arc::new(backup.clone())]))
        .with_prices(prices.clone())
        .with_spend_budget(SpendBudget::new().with_max_hop_price_ratio(2.0).unwrap());
    let g = graph(
        Aegis::new().with_on_error(handled()),
        EngineLimits::default(),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(backup.call_count(), 0);
    let record = writer_record(&engine, "t").await;
    assert!(matches!(
        record.skips()[0].reason,
        SkipReason::PriceRatio {
            max_ratio_permille: 2000,
            ..
        }
    ));

    // An output price three times the primary's is dearer too, whatever the
    // input price.
    let primary = MockLlmAdapter::new()
        .with_provider_name("cheap")
        .with_error(unavailable());
    let backup = MockLlmAdapter::new()
        .with_provider_name("dear-output")
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![Arc::new(primary), Arc::new(backup.clone())]))
        .with_prices(
            prices
                .clone()
                .with_provider_price("dear-output", Price::per_million(1.0, 3.0).unwrap()),
        )
        .with_spend_budget(SpendBudget::new().with_max_hop_price_ratio(2.0).unwrap());
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(backup.call_count(), 0);

    // Three times the price fits a ratio of 3.
    let primary = MockLlmAdapter::new()
        .with_provider_name("cheap")
        .with_error(unavailable());
    let backup = MockLlmAdapter::new()
        .with_provider_name("dear")
        .with_response("from dear");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![Arc::new(primary), Arc::new(backup)]))
        .with_prices(prices)
        .with_spend_budget(SpendBudget::new().with_max_hop_price_ratio(3.0).unwrap());
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("from dear"));
}

// ---- authentication hops --------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_revoked_key_stops_the_chain_unless_the_provider_opted_in() {
    let revoked = || {
        MockLlmAdapter::new()
            .with_provider_name("openai")
            .with_error(LlmError::AuthenticationError("invalid key".into()))
    };
    let backup = || {
        MockLlmAdapter::new()
            .with_provider_name("anthropic")
            .with_response("from backup")
    };
    // The guide's default: Permanent stops the chain.
    let spare = backup();
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain(vec![Arc::new(revoked()), Arc::new(spare.clone())]));
    let g = graph(Aegis::new(), EngineLimits::default());
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert!(!outcome.is_completed());
    assert_eq!(spare.call_count(), 0);

    // Opted in: the backup's own key answers.
    let opted = chain(vec![Arc::new(revoked()), Arc::new(backup())])
        .with_provider_hop_on_auth(0, true)
        .unwrap();
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(opted);
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("from backup"));

    // A 403 as a plain provider error hops too.
    let forbidden = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_error(LlmError::ProviderError {
            provider: "openai".into(),
            status: 403,
            message: "forbidden".into(),
            retry_after: None,
        });
    let opted = chain(vec![Arc::new(forbidden), Arc::new(backup())])
        .with_provider_hop_on_auth(0, true)
        .unwrap();
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(opted);
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("from backup"));
}

// ---- prices ---------------------------------------------------------------

#[test]
fn prices_reject_nan_negative_and_infinite_amounts() {
    assert!(Price::per_million(f64::NAN, 1.0).is_err());
    assert!(Price::per_million(1.0, -0.5).is_err());
    assert!(Price::per_million(f64::INFINITY, 1.0).is_err());
    assert!(Money::from_usd(1e30).is_err());
    assert!(SpendBudget::new().with_max_hop_price_ratio(0.5).is_err());
}

#[test]
fn costs_add_up_exactly_whatever_the_order() {
    // Ten thousand one-token calls at 0.1 $/M cost exactly what one call of
    // ten thousand tokens costs: integers, no float drift.
    let price = Price::per_million(0.1, 0.1).unwrap();
    let mut sum = Money::ZERO;
    for _ in 0..10_000 {
        sum = sum.saturating_add(price.cost(1, 0));
    }
    assert_eq!(sum, price.cost(10_000, 0));
    assert_eq!(sum, Money::from_nano_usd(1_000_000));
}

// ---- visibility -----------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_timeline_shows_each_attempts_spend_the_skips_and_the_total() {
    let llm = MockLlmAdapter::new()
        .with_stream(vec![usage_chunk("partial", 1000, 500), Err(reset())])
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm)
        .with_prices(prices("mock"))
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.003).unwrap()));
    let g = graph(
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
        EngineLimits::default(),
    );
    engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    let history = engine.store().history("t").await.unwrap();
    let page = aegis::render::timeline(&history);
    assert!(
        page.contains("spent 1500 tokens (1000 in, 500 out), $0.002000"),
        "{page}"
    );
    assert!(
        page.contains("retry (attempt 2) skipped: spend budget"),
        "{page}"
    );
    assert!(page.contains(" · spent 1500 tokens"), "{page}");
}

#[tokio::test(start_paused = true)]
async fn a_streamed_run_carries_the_spend_events() {
    use aegis::engine::{StreamEvent, StreamMode, StreamOptions};
    use futures::StreamExt;
    let llm = MockLlmAdapter::new().with_stream(vec![usage_chunk("done", 10, 5)]);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm);
    let g = graph(Aegis::new(), EngineLimits::default());
    let mut stream = engine.stream_with(
        &g,
        "t",
        json!({"question": "q"}),
        StreamOptions::new([StreamMode::Events]),
    );
    let mut spends = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Trace(
            TraceEvent::AttemptSpend { spend, .. } | TraceEvent::RunSpend { spend, .. },
        ) = event
        {
            spends.push(spend.total_tokens());
        }
    }
    assert_eq!(spends, [15, 15]);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_budget_is_spent_stops_before_its_next_superstep() {
    // `writer` spends all 15 tokens and succeeds; `after` (no model call)
    // never runs: nothing is left, so no superstep starts.
    let llm = MockLlmAdapter::new().with_stream(vec![usage_chunk("done", 10, 5)]);
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm)
        .with_spend_budget(SpendBudget::new().with_max_tokens(15));
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("Answer: {question}"),
            field_name("answer"),
        ),
    )
    .add_node("after", write("answer", json!("overwritten")));
    g.add_edge(START, "writer")
        .add_edge("writer", "after")
        .add_edge("after", END);
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("done"));
    assert!(matches!(
        outcome.into_result(),
        Err(EngineError::SpendBudgetExhausted { .. })
    ));

    // A run that ends within its budget completes.
    let llm = MockLlmAdapter::new().with_stream(vec![usage_chunk("done", 10, 5)]);
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm)
        .with_spend_budget(SpendBudget::new().with_max_tokens(16));
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("overwritten"));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_an_attempt_that_spent_nothing_is_expected_to_cost_its_request() {
    // The first attempt fails before answering (nothing spent); the retry
    // would resend a prompt of ~7 tokens with max_tokens 100: more than the
    // node's cap of 50.
    let llm = MockLlmAdapter::new()
        .with_error(unavailable())
        .with_response("never sent");
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm.clone());
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m").with_max_tokens(100),
            InputMapping::new("Answer: {question}"),
            field_name("answer"),
        ),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    let capped = |tokens: u64| {
        Aegis::new()
            .with_retry(retry(3))
            .with_on_error(handled())
            .with_spend_cap(SpendBudget::new().with_max_tokens(tokens))
    };
    g.set_aegis("writer", capped(50));
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(llm.call_count(), 1);
    let record = writer_record(&engine, "t").await;
    assert!(matches!(
        &record.skips()[0].reason,
        SkipReason::SpendBudget { expected, .. }
            if expected.estimated && expected.completion_tokens == 100
    ));

    // Under a cap of 500 the retry fits and answers.
    let llm = MockLlmAdapter::new()
        .with_error(unavailable())
        .with_response("second");
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm.clone());
    g.set_aegis("writer", capped(500));
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("second"));
}
