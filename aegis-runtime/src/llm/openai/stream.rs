//! Chat-completions streaming: `data: {json}` events ending in
//! `data: [DONE]`, with tool calls arriving as indexed fragments.

use serde::Deserialize;

use super::wire::{
    WireError, WireUsage, envelope_error, finish_reason, parse_error, tool_arguments,
};
use crate::error::LlmError;
use crate::llm::sse::{SseDecoder, SseEvent, StreamParser};
use crate::llm::{LlmChunk, LlmUsage, ToolCall};

#[derive(Deserialize)]
struct StreamEvent {
    #[serde(default)]
    choices: Vec<StreamChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct StreamChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolDelta>,
}

#[derive(Deserialize)]
struct ToolDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Default)]
struct PartialTool {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Parses an OpenAI-compatible chat-completions event stream into
/// [`LlmChunk`]s.
///
/// Text deltas become text chunks; tool-call fragments become empty
/// (progress) chunks and are assembled into whole [`ToolCall`]s delivered on
/// the chunk carrying the finish reason. An `error` object in the stream is
/// mapped like an error body; invalid JSON is a [`LlmError::ParseError`]; a
/// body that ends before `[DONE]` (and before any finish reason) is a
/// truncated stream, also a `ParseError`.
///
/// ```
/// use aegis_runtime::{OpenAiStreamParser, StreamParser};
/// let mut p = OpenAiStreamParser::new("openai");
/// let mut chunks = Vec::new();
/// p.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n", &mut chunks).unwrap();
/// p.finish(&mut chunks).unwrap();
/// assert_eq!(chunks[0].content, "Hi");
/// ```
#[derive(Debug)]
pub struct OpenAiStreamParser {
    provider: String,
    sse: SseDecoder,
    events: Vec<SseEvent>,
    tools: Vec<PartialTool>,
    finished: bool,
    done: bool,
}

impl OpenAiStreamParser {
    /// A parser for a stream from `provider` (named in errors).
    pub fn new(provider: impl Into<String>) -> Self {
        OpenAiStreamParser {
            provider: provider.into(),
            sse: SseDecoder::new(),
            events: Vec::new(),
            tools: Vec::new(),
            finished: false,
            done: false,
        }
    }

    fn event(&mut self, data: &str, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return self.flush_tools(None, out);
        }
        let event: StreamEvent = serde_json::from_str(data)
            .map_err(|e| parse_error(&self.provider, "stream event", &e))?;
        if let Some(err) = event.error {
            return Err(envelope_error(&self.provider, 200, &err, data));
        }
        let mut chunk = LlmChunk {
            usage: event.usage.map(LlmUsage::from),
            ..Default::default()
        };
        let mut progress = chunk.usage.is_some();
        let mut finish = None;
        if let Some(choice) = event.choices.into_iter().next() {
            let delta = choice.delta.unwrap_or_default();
            if let Some(text) = delta.content {
                progress |= !text.is_empty();
                chunk.content = text;
            }
            progress |= !delta.tool_calls.is_empty();
            for t in delta.tool_calls {
                self.tool_fragment(t);
            }
            finish = choice.finish_reason.as_deref().map(finish_reason);
        }
        if let Some(reason) = finish {
            self.finished = true;
            return self.flush_tools(Some((chunk, reason)), out);
        }
        if progress {
            out.push(chunk);
        }
        Ok(())
    }

    fn tool_fragment(&mut self, t: ToolDelta) {
        let found = match (t.index, &t.id) {
            (Some(i), _) => self.tools.iter().position(|p| p.index == Some(i)),
            (None, Some(id)) => self.tools.iter().position(|p| &p.id == id),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let slot = match found {
            Some(i) => &mut self.tools[i],
            None => {
                self.tools.push(PartialTool {
                    index: t.index,
                    ..Default::default()
                });
                let last = self.tools.len() - 1;
                &mut self.tools[last]
            }
        };
        if let Some(id) = t.id {
            slot.id = id;
        }
        if let Some(f) = t.function {
            if let Some(name) = f.name {
                slot.name.push_str(&name);
            }
            if let Some(args) = f.arguments {
                slot.arguments.push_str(&args);
            }
        }
    }

    /// Delivers the assembled tool calls on `last` (the finishing chunk), or
    /// on a chunk of their own.
    fn flush_tools(
        &mut self,
        last: Option<(LlmChunk, crate::llm::FinishReason)>,
        out: &mut Vec<LlmChunk>,
    ) -> Result<(), LlmError> {
        let calls = std::mem::take(&mut self.tools)
            .into_iter()
            .map(|p| {
                let arguments = tool_arguments(&self.provider, &p.name, &p.arguments)?;
                Ok(ToolCall {
                    id: p.id,
                    name: p.name,
                    arguments,
                })
            })
            .collect::<Result<Vec<_>, LlmError>>()?;
        match last {
            Some((mut chunk, reason)) => {
                chunk.tool_calls = calls;
                chunk.finish_reason = Some(reason);
                out.push(chunk);
            }
            None if !calls.is_empty() => out.push(LlmChunk {
                tool_calls: calls,
                ..Default::default()
            }),
            None => {}
        }
        Ok(())
    }
}

impl StreamParser for OpenAiStreamParser {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        let mut events = std::mem::take(&mut self.events);
        let decoded = self.sse.push(bytes, &mut events);
        let mut result = Ok(());
        for e in events.drain(..) {
            result = self.event(&e.data, out);
            if result.is_err() {
                break;
            }
        }
        self.events = events;
        result.and(decoded)
    }

    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done || self.finished {
            return self.flush_tools(None, out);
        }
        Err(LlmError::ParseError(format!(
            "{}: the stream ended before [DONE]",
            self.provider
        )))
    }
}
