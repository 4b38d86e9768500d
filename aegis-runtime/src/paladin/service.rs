//! Runs a [`Paladin`] over an [`LlmPort`]: completion → tool calls →
//! armaments, in a loop bounded by `max_loops`, reporting progress.

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tracing::Instrument;

use super::charge::Charge;
use super::{PaladinPort, PaladinResult};
use crate::error::{LlmError, PaladinError};
use crate::graph::SpendMeter;
use crate::graph::{Armament, Paladin};
use crate::graph::{HeartbeatHandle, NodeContext};
use crate::llm::{
    LlmMessage, LlmPort, LlmRequest, LlmResponse, LlmUsage, ResponseBuilder, ToolCall,
    ToolDefinition,
};
use crate::share::IntoShared;

/// The [`PaladinPort`] that runs agents over an [`LlmPort`] — a single
/// provider adapter, or a [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter)
/// chain.
///
/// One execution sends the system prompt and the input, then loops: a
/// completion; if it asks for tools, each [`Armament`] is invoked and its
/// result sent back; until a completion asks for none (its text is the
/// output) or `max_loops` completions have asked for tools
/// ([`PaladinError::MaxLoopsExceeded`]).
///
/// **Progress.** Completions are *streamed* by default, so that
/// [`PaladinPort::execute_observed`] can beat the attempt's heartbeat after
/// every streamed chunk, after every completion and after every armament
/// call: an idle timeout then measures silence, not length.
/// [`PaladinExecutionService::with_streaming`]`(false)` uses whole
/// completions instead (one beat per completion).
///
/// **Errors.** A provider error is [`PaladinError::Llm`], unchanged (its
/// transience is the provider's); a tool the agent does not have is an
/// [`PaladinError::ArmamentError`]; an armament's own error is returned as
/// it reported it. An empty model or `max_loops` of 0 is a
/// [`PaladinError::ConfigurationError`].
///
/// **Two stream deadlines.** The attempt's first-chunk deadline
/// ([`HeartbeatHandle::first_chunk`], a node's `timeout(first_chunk = ..)`)
/// bounds each streamed completion's wait for its first chunk, per provider
/// ([`LlmPort::generate_stream_within`]: a fallback chain hops past a silent
/// provider). While a completion waits for its first chunk under that
/// deadline, the idle window is held ([`HeartbeatHandle::hold_idle`]); from
/// the first chunk on, silence is the idle timeout's, and is never hopped.
///
/// **Spend.** Inside an engine run, every completion is charged to the
/// attempt's meter when it ends or is dropped: the provider's usage where it
/// reported it, an estimate (marked) where not; nothing for a call that
/// failed before answering. The meter is in scope around the provider call,
/// so a [`FallbackLlmAdapter`](crate::llm::FallbackLlmAdapter) checks each
/// hop against what is left. With nothing left of the run's budget or the
/// node's cap, a completion is not sent
/// ([`LlmError::SpendBudgetExceeded`](crate::error::LlmError::SpendBudgetExceeded)).
/// See [`SpendBudget`](crate::policy::SpendBudget).
///
/// `PaladinResult::served_by` is the serving provider a fallback chain
/// stamped on the final completion (`None` for a port that stamps none),
/// with its `chain_position` and whether it was a fallback (not the
/// chain's first); `model` is the model the final completion reported, else
/// the one requested; `usage` adds up every completion's token counts.
pub struct PaladinExecutionService {
    llm: Arc<dyn LlmPort>,
    streaming: bool,
}

impl fmt::Debug for PaladinExecutionService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaladinExecutionService")
            .field("provider", &self.llm.get_provider_name())
            .field("streaming", &self.streaming)
            .finish()
    }
}

impl PaladinExecutionService {
    /// A service over `llm`, streaming completions.
    pub fn new(llm: impl IntoShared<dyn LlmPort>) -> Self {
        PaladinExecutionService {
            llm: llm.into_shared(),
            streaming: true,
        }
    }

    /// Streams completions (`true`, the default) or asks for whole ones.
    pub fn with_streaming(mut self, streaming: bool) -> Self {
        self.streaming = streaming;
        self
    }

    /// One completion, beating on every chunk and once at its end; each
    /// chunk's text goes to the attempt's stream, if any.
    async fn complete(
        &self,
        request: &LlmRequest,
        heartbeat: &HeartbeatHandle,
        ctx: Option<&NodeContext>,
    ) -> Result<LlmResponse, PaladinError> {
        // One span per completion, named and attributed after OpenTelemetry's
        // GenAI conventions; nothing is built unless a subscriber wants it.
        let span = tracing::info_span!(
            "aegis.llm",
            otel.name = tracing::field::Empty,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = self.llm.get_provider_name(),
            gen_ai.request.model = request.model.as_str(),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            aegis.served_by = tracing::field::Empty,
            aegis.chain_position = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("chat {}", request.model));
        }
        let result = self
            .completion(request, heartbeat, ctx)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            llm_span_outcome(&span, &result);
        }
        result
    }

    async fn completion(
        &self,
        request: &LlmRequest,
        heartbeat: &HeartbeatHandle,
        ctx: Option<&NodeContext>,
    ) -> Result<LlmResponse, PaladinError> {
        let tokens = ctx.filter(|c| c.is_streaming());
        let no_meter = SpendMeter::default();
        let meter = ctx.map_or(&no_meter, |c| &c.meter);
        if let Some(remaining) = meter.remaining().filter(|r| r.is_exhausted()) {
            return Err(PaladinError::Llm(LlmError::SpendBudgetExceeded(format!(
                "not sent: {remaining}"
            ))));
        }
        let prompt_estimate = if meter.is_active() {
            crate::llm::estimate::prompt_tokens(request)
        } else {
            0
        };
        let mut charge = Charge::new(
            meter,
            self.llm.get_provider_name(),
            self.llm.model_name(),
            &request.model,
            prompt_estimate,
        );
        charge.expect(u64::from(request.max_tokens.unwrap_or(0)));
        let response = if self.streaming {
            let first_chunk = heartbeat.first_chunk();
            let mut stream = {
                // The first-chunk deadline, not the idle window, bounds the
                // wait for the first chunk (per provider of a chain).
                let _hold = first_chunk.map(|_| heartbeat.hold_idle());
                meter
                    .clone()
                    .scope(self.llm.generate_stream_within(request, first_chunk))
                    .await?
            };
            let mut response = ResponseBuilder::default();
            while let Some(chunk) = stream.next().await {
                heartbeat.beat();
                let chunk = chunk?;
                charge.chunk(&chunk);
                if let Some(ctx) = tokens {
                    let provider = chunk
                        .served_by()
                        .unwrap_or_else(|| self.llm.get_provider_name());
                    ctx.emit_token(provider, &chunk.content);
                }
                response.push(chunk);
            }
            response.finish()
        } else {
            let response = meter.clone().scope(self.llm.generate(request)).await?;
            charge.response(&response);
            if let Some(ctx) = tokens {
                let provider = response
                    .served_by()
                    .unwrap_or_else(|| self.llm.get_provider_name());
                ctx.emit_token(provider, &response.content);
            }
            response
        };
        heartbeat.beat();
        Ok(response)
    }
}

/// Records a completion's answer (or failure) on its span.
fn llm_span_outcome(span: &tracing::Span, result: &Result<LlmResponse, PaladinError>) {
    match result {
        Ok(response) => {
            // Empty when the provider named no model (a stream may not).
            if !response.model.is_empty() {
                span.record("gen_ai.response.model", response.model.as_str());
            }
            if let Some(usage) = &response.usage {
                span.record("gen_ai.usage.input_tokens", usage.prompt_tokens);
                span.record("gen_ai.usage.output_tokens", usage.completion_tokens);
            }
            if let Some(provider) = response.served_by() {
                span.record("aegis.served_by", provider);
            }
            if let Some(position) = response.chain_position() {
                span.record("aegis.chain_position", position);
            }
        }
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.kind());
        }
    }
}

fn tool_definitions(armaments: &[Arc<dyn Armament>]) -> Vec<ToolDefinition> {
    armaments
        .iter()
        .map(|a| ToolDefinition {
            name: a.name().to_string(),
            description: a.description().to_string(),
            parameters: a.parameters(),
        })
        .collect()
}

/// What a tool result looks like to the model: strings as they are, other
/// JSON values serialised.
fn tool_result_text(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

async fn invoke(paladin: &Paladin, call: &ToolCall) -> Result<String, PaladinError> {
    let armament = paladin
        .armaments
        .iter()
        .find(|a| a.name() == call.name)
        .ok_or_else(|| PaladinError::ArmamentError {
            armament: call.name.clone(),
            message: format!("`{}` has no armament of this name", paladin.name),
        })?;
    armament
        .invoke(call.arguments.clone())
        .await
        .map(tool_result_text)
}

#[async_trait]
impl PaladinPort for PaladinExecutionService {
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
        self.run(paladin, input, heartbeat, None).await
    }

    /// Streams each completion's text to the attempt's stream as well (a
    /// whole completion, with streaming off, arrives as one token).
    async fn execute_in(
        &self,
        paladin: &Paladin,
        input: &str,
        ctx: &NodeContext,
    ) -> Result<PaladinResult, PaladinError> {
        self.run(paladin, input, &ctx.heartbeat, Some(ctx)).await
    }
}

impl PaladinExecutionService {
    /// One execution: completions and armament calls until an answer.
    async fn run(
        &self,
        paladin: &Paladin,
        input: &str,
        heartbeat: &HeartbeatHandle,
        ctx: Option<&NodeContext>,
    ) -> Result<PaladinResult, PaladinError> {
        if paladin.model.trim().is_empty() {
            return Err(PaladinError::ConfigurationError(format!(
                "paladin `{}` has no model",
                paladin.name
            )));
        }
        if paladin.max_loops == 0 {
            return Err(PaladinError::ConfigurationError(format!(
                "paladin `{}` has max_loops 0",
                paladin.name
            )));
        }
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = &paladin.system_prompt {
            messages.push(LlmMessage::system(system.clone()));
        }
        messages.push(LlmMessage::user(input));
        let mut request = LlmRequest::new(paladin.model.clone(), messages)
            .with_stop(paladin.stop_words.clone())
            .with_tools(tool_definitions(&paladin.armaments));
        request.temperature = paladin.temperature;
        request.max_tokens = paladin.max_tokens;

        let mut usage: Option<LlmUsage> = None;
        for round in 1..=paladin.max_loops {
            let response = self.complete(&request, heartbeat, ctx).await?;
            if let Some(u) = &response.usage {
                usage.get_or_insert_with(LlmUsage::default).accumulate(u);
            }
            if response.tool_calls.is_empty() {
                let model = if response.model.is_empty() {
                    request.model.clone()
                } else {
                    response.model.clone()
                };
                return Ok(PaladinResult {
                    served_by: response.served_by().map(str::to_string),
                    chain_position: response.chain_position(),
                    fallback: response.served_by_fallback(),
                    model: Some(model),
                    output: response.content,
                    loops: round,
                    usage,
                });
            }
            let calls = response.tool_calls;
            let mut results = Vec::with_capacity(calls.len());
            for call in &calls {
                let text = invoke(paladin, call).await?;
                heartbeat.beat();
                results.push(LlmMessage::tool(call.id.clone(), text));
            }
            request.messages.push(LlmMessage::assistant_with_tool_calls(
                response.content,
                calls,
            ));
            request.messages.extend(results);
        }
        Err(PaladinError::MaxLoopsExceeded(paladin.max_loops))
    }
}
