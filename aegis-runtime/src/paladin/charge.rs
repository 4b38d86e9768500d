//! What one completion spent, charged to the attempt's meter when the
//! completion ends — or when it is dropped mid-stream (a timeout, a
//! cancellation), so an abandoned completion counts what it streamed.
//!
//! The provider's own usage wins; what it did not report (a stream cut
//! before its usage event, a server that sends none) is estimated, and the
//! charge is marked as an estimate.

use crate::graph::SpendMeter;
use crate::llm::estimate::text_tokens;
use crate::llm::{LlmChunk, LlmResponse, LlmUsage, SERVED_MODEL_KEY};
use crate::policy::Spend;

/// One completion's charge in progress.
pub(super) struct Charge<'a> {
    meter: &'a SpendMeter,
    provider: String,
    /// The model the chain stamped, the port's own, the request's: the
    /// first the price table knows prices the call.
    served_model: Option<String>,
    port_model: Option<String>,
    request_model: String,
    prompt_estimate: u64,
    /// Tokens estimated from what arrived (text and tool calls).
    streamed_tokens: u64,
    usage: Option<LlmUsage>,
    /// Whether any answer arrived: a call refused before answering costs
    /// nothing.
    answered: bool,
}

impl<'a> Charge<'a> {
    pub(super) fn new(
        meter: &'a SpendMeter,
        provider: &str,
        port_model: Option<&str>,
        request_model: &str,
        prompt_estimate: u64,
    ) -> Self {
        Charge {
            meter,
            provider: provider.to_string(),
            served_model: None,
            port_model: port_model.map(str::to_string),
            request_model: request_model.to_string(),
            prompt_estimate,
            streamed_tokens: 0,
            usage: None,
            answered: false,
        }
    }

    /// Notes on the meter what this request is expected to spend: its
    /// estimated prompt plus `max_output` tokens, priced like the call.
    pub(super) fn expect(&self, max_output: u64) {
        if !self.meter.is_active() {
            return;
        }
        let cost = self.meter.cost(
            &self.provider,
            &self.models(),
            self.prompt_estimate,
            max_output,
        );
        self.meter
            .expect(Spend::new(self.prompt_estimate, max_output, cost).with_estimated(true));
    }

    fn models(&self) -> Vec<&str> {
        [
            self.served_model.as_deref(),
            self.port_model.as_deref(),
            Some(self.request_model.as_str()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// A chunk arrived.
    pub(super) fn chunk(&mut self, chunk: &LlmChunk) {
        if !self.meter.is_active() {
            return;
        }
        self.answered = true;
        if let Some(p) = chunk.served_by() {
            p.clone_into(&mut self.provider);
        }
        if let Some(m) = chunk
            .metadata
            .get(SERVED_MODEL_KEY)
            .and_then(|v| v.as_str())
        {
            self.served_model = Some(m.to_string());
        }
        self.streamed_tokens = self
            .streamed_tokens
            .saturating_add(text_tokens(&chunk.content));
        for call in &chunk.tool_calls {
            self.streamed_tokens = self
                .streamed_tokens
                .saturating_add(text_tokens(&call.name))
                .saturating_add(text_tokens(&call.arguments.to_string()));
        }
        // Streamed counts are running totals (OpenAI's, and vLLM's
        // `continuous_usage_stats` on every chunk; Anthropic's output
        // count), or one side each (Anthropic's start and delta): the
        // largest seen of each side is the completion's, never their sum.
        if let Some(u) = &chunk.usage {
            let seen = self.usage.get_or_insert_with(LlmUsage::default);
            seen.prompt_tokens = seen.prompt_tokens.max(u.prompt_tokens);
            seen.completion_tokens = seen.completion_tokens.max(u.completion_tokens);
        }
    }

    /// A whole response arrived.
    pub(super) fn response(&mut self, response: &LlmResponse) {
        if !self.meter.is_active() {
            return;
        }
        let chunk = LlmChunk::default()
            .with_content(response.content.clone())
            .with_tool_calls(response.tool_calls.clone())
            .with_usage(response.usage)
            .with_metadata(response.metadata.clone());
        self.chunk(&chunk);
    }

    /// The spend so far: the provider's counts where it gave them, else
    /// estimates.
    fn spend(&self) -> Spend {
        let (prompt, completion, estimated) = match self.usage {
            Some(u) => {
                let prompt_missing = u.prompt_tokens == 0;
                let completion_missing = u.completion_tokens == 0 && self.streamed_tokens > 0;
                (
                    if prompt_missing {
                        self.prompt_estimate
                    } else {
                        u.prompt_tokens
                    },
                    if completion_missing {
                        self.streamed_tokens
                    } else {
                        u.completion_tokens
                    },
                    prompt_missing || completion_missing,
                )
            }
            None => (self.prompt_estimate, self.streamed_tokens, true),
        };
        let cost = self
            .meter
            .cost(&self.provider, &self.models(), prompt, completion);
        Spend::new(prompt, completion, cost).with_estimated(estimated)
    }
}

impl Drop for Charge<'_> {
    /// Charges the completion, finished or abandoned.
    fn drop(&mut self) {
        if self.answered {
            self.meter.charge(&self.spend());
        }
    }
}
