//! Model fallback inside a Paladin node under an Aegis.
//!
//! A chain of three mock providers — the first answers 503, the second is
//! rate limited (both transient, so the chain hops; no credential is
//! rejected on the way), the third streams an answer — runs a Paladin node
//! with a retry and timeout policy. The program prints every hop and the
//! provider that served the answer.
//!
//! With `OPENAI_BASE_URL` and `OPENAI_API_KEY` set (and optionally
//! `OPENAI_MODEL`, default `gpt-4o-mini`), a real OpenAI-compatible provider
//! goes first and the mocks become its fallbacks. Without them the example
//! needs no network and no key:
//!
//! ```text
//! cargo run --example fallback
//! ```

use aegis::error::LlmError;
use aegis::error::PaladinError;
use aegis::graph::EngineLimits;
use aegis::graph::HeartbeatHandle;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::LlmChunk;
use aegis::llm::LlmPort;
use aegis::llm::{FallbackLlmAdapter, MockLlmAdapter, OpenAiCompatibleLlmAdapter};
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::paladin::PaladinPort;
use aegis::paladin::PaladinResult;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Prints who served each Paladin execution (`served_by` is observability:
/// it is not written to the graph's state).
struct ReportServedBy(PaladinExecutionService);

#[async_trait]
impl PaladinPort for ReportServedBy {
    async fn execute(&self, paladin: &Paladin, input: &str) -> Result<PaladinResult, PaladinError> {
        self.execute_observed(paladin, input, &HeartbeatHandle::noop())
            .await
    }

    async fn execute_observed(
        &self,
        paladin: &Paladin,
        input: &str,
        heartbeat: &HeartbeatHandle,
    ) -> Result<PaladinResult, PaladinError> {
        let result = self.0.execute_observed(paladin, input, heartbeat).await?;
        println!(
            "paladin `{}` served_by: {}",
            paladin.name,
            result.served_by.as_deref().unwrap_or("(not stamped)")
        );
        Ok(result)
    }
}

fn providers() -> Result<Vec<Arc<dyn LlmPort>>, Box<dyn std::error::Error>> {
    let mut chain: Vec<Arc<dyn LlmPort>> = Vec::new();
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_string());
        println!("a real provider goes first: {base} ({model})");
        chain.push(Arc::new(
            OpenAiCompatibleLlmAdapter::new(base)?
                .with_api_key(key)
                .with_model(model),
        ));
    }
    chain.push(Arc::new(
        MockLlmAdapter::new()
            .with_provider_name("primary")
            .with_error(LlmError::ProviderError {
                provider: "primary".to_string(),
                status: 503,
                message: "upstream overloaded".to_string(),
                retry_after: None,
            }),
    ));
    chain.push(Arc::new(
        MockLlmAdapter::new()
            .with_provider_name("secondary")
            .with_error(LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
            }),
    ));
    chain.push(Arc::new(
        MockLlmAdapter::new()
            .with_provider_name("local")
            .with_stream_every(
                Duration::from_millis(20),
                vec![
                    Ok(LlmChunk::text("Retry the transient, ")),
                    Ok(LlmChunk::text("hop past the overloaded, ")),
                    Ok(LlmChunk::text("never resend the rejected.")),
                ],
            ),
    ));
    Ok(chain)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Hops are also `warn!` lines naming both providers.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_target(false)
        .init();
    let hops = CollectingTraceSink::new();
    let chain = FallbackLlmAdapter::new(providers()?)?.with_trace_sink(hops.clone());
    println!("chain: {}", chain.provider_names().join(" -> "));
    let port = ReportServedBy(PaladinExecutionService::new(chain));

    let question = FieldName::new("question")?;
    let answer = FieldName::new("answer")?;
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(question, DispatchRule::LastWrite, None, true),
        FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    let paladin = Paladin::new("Advisor")
        .with_model("gpt-4o-mini")
        .with_system_prompt("Answer in one sentence.");
    graph.add_node(
        "advisor",
        NodeSpec::paladin(paladin, InputMapping::new("{question}"), answer),
    );
    graph.add_edge(START, "advisor").add_edge("advisor", END);
    graph.set_aegis(
        "advisor",
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_timeout(
                TimeoutPolicy::run(Duration::from_secs(120))
                    // Streamed chunks beat the heartbeat, so only silence counts.
                    .with_idle_timeout(Duration::from_secs(10)),
            ),
    );

    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);
    let outcome = engine
        .start(
            &graph,
            "fallback-demo",
            json!({"question": "How should an agent treat a failing model provider?"}),
        )
        .await?;

    for event in hops.events() {
        if let TraceEvent::FallbackHop {
            from_provider,
            to_provider,
            ..
        } = event
        {
            println!("hop: {from_provider} -> {to_provider}");
        }
    }
    match outcome.node_error() {
        Some(e) => println!("the node failed: {e}"),
        None => println!(
            "answer: {}",
            outcome.state().get("answer").unwrap_or(&json!(null))
        ),
    }
    Ok(())
}
