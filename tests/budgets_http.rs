//! Spend budgets over the real HTTP adapters: the usage fields of
//! OpenAI-compatible and Anthropic responses, streamed and not (wire
//! fixtures in tests/fixtures/usage/), reach the attempt records and the
//! trace, and budgets stop a retry, a hop and a run at the right moment,
//! against a local server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::{AnthropicLlmAdapter, FallbackLlmAdapter, LlmPort, OpenAiCompatibleLlmAdapter};
use aegis::paladin::{Paladin, PaladinExecutionService};
use aegis::policy::{
    ErrorHandlerSpec, Money, Price, PriceTable, SkipReason, SkippedStep, SpendBudget,
};
use aegis::prelude::*;
use aegis::waypoint::NodeExecutionRecord;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;
use support::http_server::{Reply, TestServer};

const OPENAI_STREAM: &str = include_str!("fixtures/usage/openai_stream_usage.sse");
const OPENAI_WHOLE: &str = include_str!("fixtures/usage/openai_completion_usage.json");
const OPENAI_SPENT_THEN_FAILED: &str =
    include_str!("fixtures/usage/openai_stream_usage_then_error.sse");
const ANTHROPIC_STREAM: &str = include_str!("fixtures/usage/anthropic_stream_usage.sse");
const ANTHROPIC_WHOLE: &str = include_str!("fixtures/usage/anthropic_message_usage.json");

fn openai(server: &TestServer) -> OpenAiCompatibleLlmAdapter {
    OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_model("gpt-4o-mini")
}

fn anthropic(server: &TestServer) -> AnthropicLlmAdapter {
    AnthropicLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_model("claude-sonnet-4-5")
}

/// gpt-4o-mini at 0.15 / 0.60 $ per million tokens, claude-sonnet-4-5 at
/// 3 / 15.
fn prices() -> PriceTable {
    PriceTable::new()
        .with_price(
            "openai",
            "gpt-4o-mini",
            Price::per_million(0.15, 0.60).unwrap(),
        )
        .with_price(
            "anthropic",
            "claude-sonnet-4-5",
            Price::per_million(3.0, 15.0).unwrap(),
        )
}

fn graph(aegis: Aegis) -> WarGraph {
    graph_with(Paladin::new("Writer").with_model("m"), aegis)
}

fn graph_with(paladin: Paladin, aegis: Aegis) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            paladin,
            InputMapping::new("Answer: {question}"),
            field_name("answer"),
        ),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    g.set_aegis("writer", aegis);
    g
}

fn engine_over(llm: impl LlmPort, streaming: bool) -> WarEngine {
    WarEngine::new(InMemoryWaypointStore::new())
        .with_paladin_port(PaladinExecutionService::new(llm).with_streaming(streaming))
        .with_prices(prices())
}

async fn record(engine: &WarEngine) -> NodeExecutionRecord {
    records(engine, "t")
        .await
        .into_iter()
        .find(|r| r.node_id.as_str() == "writer")
        .expect("a writer record")
}

fn handled() -> ErrorHandlerSpec {
    ErrorHandlerSpec::Absorb {
        fallback_delta: delta(&[("answer", json!("handled"))]),
    }
}

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_initial_interval(Duration::from_millis(1))
        .with_jitter(false)
}

async fn run(engine: &WarEngine, aegis: Aegis) -> RunOutcome {
    engine
        .start(
            &graph(aegis),
            "t",
            json!({"question": "the capital of France?"}),
        )
        .await
        .unwrap()
}

// ---- usage from the wire --------------------------------------------------

#[tokio::test]
async fn openai_usage_is_read_streamed_and_whole() {
    for (streaming, reply) in [
        (true, Reply::sse(vec![OPENAI_STREAM])),
        (false, Reply::body(200, OPENAI_WHOLE)),
    ] {
        let server = TestServer::start(vec![reply]).await;
        let engine = engine_over(openai(&server), streaming);
        let outcome = run(&engine, Aegis::new()).await;
        assert_eq!(answer(&outcome), json!("Paris is the capital."));
        let spend = record(&engine).await.spend().expect("spend");
        assert_eq!((spend.prompt_tokens, spend.completion_tokens), (1200, 300));
        assert!(!spend.estimated, "streaming {streaming}: {spend:?}");
        // 1200 * 0.15 + 300 * 0.60 = 360 micro-dollars.
        assert_eq!(spend.cost, Money::from_nano_usd(360_000));
        // Streamed, the adapter asked for the usage chunk.
        let sent = &server.requests()[0].body;
        assert_eq!(sent.get("stream_options").is_some(), streaming, "{sent}");
    }
}

#[tokio::test]
async fn running_usage_totals_on_every_chunk_are_not_added_up() {
    let stream = include_str!("fixtures/usage/openai_stream_continuous_usage.sse");
    let server = TestServer::start(vec![Reply::sse(vec![stream])]).await;
    let engine = engine_over(openai(&server), true);
    run(&engine, Aegis::new()).await;
    let spend = record(&engine).await.spend().expect("spend");
    assert_eq!((spend.prompt_tokens, spend.completion_tokens), (1200, 300));
}

#[tokio::test]
async fn anthropic_usage_is_read_streamed_and_whole() {
    for (streaming, reply) in [
        (true, Reply::sse(vec![ANTHROPIC_STREAM])),
        (false, Reply::body(200, ANTHROPIC_WHOLE)),
    ] {
        let server = TestServer::start(vec![reply]).await;
        let engine = engine_over(anthropic(&server), streaming);
        let outcome = run(&engine, Aegis::new()).await;
        assert_eq!(answer(&outcome), json!("Paris is the capital."));
        let spend = record(&engine).await.spend().expect("spend");
        // message_start's input tokens and message_delta's output tokens.
        assert_eq!((spend.prompt_tokens, spend.completion_tokens), (1200, 300));
        assert!(!spend.estimated);
        // 1200 * 3 + 300 * 15 = 8100 micro-dollars.
        assert_eq!(spend.cost, Money::from_nano_usd(8_100_000));
    }
}

#[tokio::test]
async fn a_server_that_reports_no_usage_is_estimated_and_marked() {
    let stream = include_str!("fixtures/llama_cpp/stream_max_tokens_4.sse");
    let server = TestServer::start(vec![Reply::sse(vec![stream])]).await;
    let engine = engine_over(openai(&server), true);
    run(&engine, Aegis::new()).await;
    let spend = record(&engine).await.spend().expect("spend");
    assert!(spend.estimated);
    assert!(
        spend.prompt_tokens > 0 && spend.completion_tokens > 0,
        "{spend:?}"
    );
}

// ---- budgets stopping a retry, a hop, a run -------------------------------

#[tokio::test]
async fn a_failed_attempt_that_spent_stops_a_retry_it_cannot_afford() {
    // Attempt 1 spends 1000 in + 500 out = 450 micro-dollars, then fails
    // (a transient server error mid-stream); 600 were budgeted, 150 are
    // left: the retry is not sent, the handler runs.
    let server = TestServer::start(vec![
        Reply::sse(vec![OPENAI_SPENT_THEN_FAILED]),
        Reply::sse(vec![OPENAI_STREAM]),
    ])
    .await;
    let engine = engine_over(openai(&server), true)
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_nano_usd(600_000)));
    let outcome = run(
        &engine,
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
    )
    .await;
    assert_eq!(answer(&outcome), json!("handled"));
    assert_eq!(server.requests().len(), 1, "the retry was not sent");
    let rec = record(&engine).await;
    assert_eq!(
        rec.attempts[0].spend.unwrap().cost,
        Money::from_nano_usd(450_000)
    );
    assert_eq!(rec.skips()[0].step, SkippedStep::Retry { attempt: 2 });
    assert!(matches!(
        rec.skips()[0].reason,
        SkipReason::SpendBudget { .. }
    ));

    // With 900 budgeted the retry fits and answers.
    let server = TestServer::start(vec![
        Reply::sse(vec![OPENAI_SPENT_THEN_FAILED]),
        Reply::sse(vec![OPENAI_STREAM]),
    ])
    .await;
    let engine = engine_over(openai(&server), true)
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_nano_usd(900_000)));
    let outcome = run(
        &engine,
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
    )
    .await;
    assert_eq!(answer(&outcome), json!("Paris is the capital."));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_run_out_of_tokens_ends_with_its_own_reason_before_sending_more() {
    let server = TestServer::start(vec![
        Reply::sse(vec![OPENAI_SPENT_THEN_FAILED]),
        Reply::sse(vec![OPENAI_STREAM]),
    ])
    .await;
    let engine = engine_over(openai(&server), true)
        .with_spend_budget(SpendBudget::new().with_max_tokens(1500));
    let outcome = run(
        &engine,
        Aegis::new().with_retry(retry(3)).with_on_error(handled()),
    )
    .await;
    assert!(
        matches!(
            outcome.into_result(),
            Err(EngineError::SpendBudgetExhausted { spent, .. }) if spent.total_tokens() == 1500
        ),
        "the run ran out"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_hop_to_a_provider_whose_window_the_prompt_cannot_fit_is_skipped_unsent() {
    let small = TestServer::start(vec![]).await;
    let large = TestServer::start(vec![Reply::sse(vec![ANTHROPIC_STREAM])]).await;
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(openai(&small).with_context_window(8)) as Arc<dyn LlmPort>,
        Arc::new(anthropic(&large).with_context_window(200_000)),
    ])
    .unwrap();
    let engine = engine_over(chain, true);
    let outcome = run(&engine, Aegis::new()).await;
    assert_eq!(answer(&outcome), json!("Paris is the capital."));
    assert!(
        small.requests().is_empty(),
        "nothing sent to the small model"
    );
    let rec = record(&engine).await;
    assert!(matches!(
        &rec.skips()[0],
        s if matches!(&s.step, SkippedStep::Hop { provider, position: 0 } if provider == "openai")
            && matches!(s.reason, SkipReason::ContextWindow { window: 8, .. })
    ));
    // The served call is priced at the backup's model.
    assert_eq!(rec.spend().unwrap().cost, Money::from_nano_usd(8_100_000));
}

#[tokio::test]
async fn a_hop_that_would_pass_the_money_left_is_skipped_and_the_handler_runs() {
    // The primary answers 503; the backup at Claude's price, with
    // max_tokens 100_000, is expected to cost about 1.5 $.
    let primary =
        TestServer::start(vec![Reply::body(503, r#"{"error":{"message":"busy"}}"#)]).await;
    let backup = TestServer::start(vec![Reply::sse(vec![ANTHROPIC_STREAM])]).await;
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(openai(&primary)) as Arc<dyn LlmPort>,
        Arc::new(anthropic(&backup)),
    ])
    .unwrap();
    let engine = engine_over(chain, true)
        .with_spend_budget(SpendBudget::new().with_max_cost(Money::from_usd(0.5).unwrap()));
    let g = graph_with(
        Paladin::new("Writer")
            .with_model("m")
            .with_max_tokens(100_000),
        Aegis::new().with_on_error(handled()),
    );
    let outcome = engine
        .start(&g, "t", json!({"question": "q"}))
        .await
        .unwrap();
    assert_eq!(answer(&outcome), json!("handled"));
    assert!(backup.requests().is_empty());
    let rec = record(&engine).await;
    assert!(matches!(
        &rec.skips()[0],
        s if matches!(&s.step, SkippedStep::Hop { position: 1, .. })
            && matches!(s.reason, SkipReason::SpendBudget { .. })
    ));
}

#[tokio::test]
async fn a_revoked_key_hops_to_the_other_vendor_when_opted_in() {
    let primary = TestServer::start(vec![Reply::body(
        401,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await;
    let backup = TestServer::start(vec![Reply::sse(vec![ANTHROPIC_STREAM])]).await;
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(openai(&primary)) as Arc<dyn LlmPort>,
        Arc::new(anthropic(&backup)),
    ])
    .unwrap()
    .with_provider_hop_on_auth(0, true)
    .unwrap();
    let engine = engine_over(chain, true);
    let outcome = run(&engine, Aegis::new()).await;
    assert_eq!(answer(&outcome), json!("Paris is the capital."));
}

// ---- an exhausted provider account ----------------------------------------

const INSUFFICIENT_QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;

#[tokio::test]
async fn an_out_of_credit_429_is_not_retried_but_a_chain_hops_past_it() {
    // Alone: Permanent, so the retry policy does not resend it.
    let server = TestServer::start(vec![
        Reply::body(429, INSUFFICIENT_QUOTA),
        Reply::sse(vec![OPENAI_STREAM]),
    ])
    .await;
    let engine = engine_over(openai(&server), true);
    let outcome = run(&engine, Aegis::new().with_retry(retry(3))).await;
    assert!(!outcome.is_completed());
    assert_eq!(server.requests().len(), 1, "no retry of an empty account");
    let error = outcome.node_error().expect("a node error");
    assert_eq!(error.transience, aegis::error::Transience::Permanent);

    // In a chain: the next provider bills another account.
    let primary = TestServer::start(vec![Reply::body(429, INSUFFICIENT_QUOTA)]).await;
    let backup = TestServer::start(vec![Reply::sse(vec![ANTHROPIC_STREAM])]).await;
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(openai(&primary)) as Arc<dyn LlmPort>,
        Arc::new(anthropic(&backup)),
    ])
    .unwrap();
    let engine = engine_over(chain, true);
    let outcome = run(&engine, Aegis::new()).await;
    assert_eq!(answer(&outcome), json!("Paris is the capital."));
}
