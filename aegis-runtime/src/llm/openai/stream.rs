//! Chat-completions streaming: `data: {json}` events ending in
//! `data: [DONE]`, with tool calls arriving as indexed fragments.

use serde::Deserialize;
use std::collections::HashMap;

use super::wire::{
    WireError, WireUsage, envelope_error, finish_reason, parse_error, tool_arguments,
};
use crate::error::{KnownSecrets, LlmError};
use crate::llm::sse::{SseDialect, SseEvent, SseStreamParser};
use crate::llm::{LlmChunk, LlmUsage, ToolCall};

#[derive(Deserialize)]
struct StreamEvent {
    #[serde(default)]
    model: Option<String>,
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
    id: String,
    name: String,
    arguments: String,
}

/// Parses an OpenAI-compatible chat-completions event stream into
/// [`LlmChunk`]s: the shared SSE framing with the [`OpenAiEvents`] dialect.
///
/// Text deltas become text chunks; tool-call fragments become empty
/// (progress) chunks and are assembled into whole [`ToolCall`]s delivered on
/// the chunk carrying the finish reason, in time linear in the number of
/// fragments. An `error` object in the stream is mapped like an error body;
/// invalid JSON, or an event over the bound, is a [`LlmError::ParseError`];
/// a body that ends before `[DONE]` (and before any finish reason) is a
/// truncated stream, also a `ParseError`.
///
/// ```
/// use aegis_runtime::__internal::{OpenAiStreamParser, StreamParser};
/// let mut p = OpenAiStreamParser::new("openai");
/// let mut chunks = Vec::new();
/// p.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n", &mut chunks).unwrap();
/// p.finish(&mut chunks).unwrap();
/// assert_eq!(chunks[0].content, "Hi");
/// ```
#[doc(hidden)]
pub type OpenAiStreamParser = SseStreamParser<OpenAiEvents>;

impl OpenAiStreamParser {
    /// A parser for a stream from `provider` (named in errors).
    pub fn new(provider: impl Into<String>) -> Self {
        SseStreamParser::from_dialect(OpenAiEvents {
            provider: provider.into(),
            secrets: KnownSecrets::default(),
            tools: Vec::new(),
            by_index: HashMap::new(),
            by_id: HashMap::new(),
            finished: false,
            done: false,
            events: 0,
            model: None,
            model_seen: false,
        })
    }

    /// Removes `secrets` from every error this parser returns, before it is
    /// bounded (the adapters pass their key and registered secrets).
    pub fn with_secrets(mut self, secrets: KnownSecrets) -> Self {
        self.dialect.secrets = secrets;
        self
    }
}

/// The chat-completions events of an [`OpenAiStreamParser`].
#[derive(Debug)]
#[doc(hidden)]
pub struct OpenAiEvents {
    provider: String,
    secrets: KnownSecrets,
    /// Calls in the order they opened.
    tools: Vec<PartialTool>,
    /// Where each call sits in `tools`, by its index and by its id: a
    /// fragment finds its call in constant time, never by a rescan.
    by_index: HashMap<u64, usize>,
    by_id: HashMap<String, usize>,
    finished: bool,
    done: bool,
    /// Events seen: a body that ends with none is reported as such.
    events: usize,
    /// The model the stream named, until a chunk carries it out.
    model: Option<String>,
    /// Whether the stream named its model yet (each event repeats it).
    model_seen: bool,
}

/// The end of the error a stream with no event at all ends in (after the
/// provider's name): a server that failed after answering 200, before its
/// first event. llama.cpp's Python server does this for every error it
/// meets once streaming began, a prompt over its context included; the
/// adapter then asks again without streaming to learn the error.
pub(crate) const NO_EVENT: &str = "the stream ended without any event";

impl OpenAiEvents {
    fn data(&mut self, data: &str, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        self.events = self.events.saturating_add(1);
        if data.trim() == "[DONE]" {
            self.done = true;
            return self.flush_tools(None, out);
        }
        let event: StreamEvent = serde_json::from_str(data)
            .map_err(|e| parse_error(&self.provider, &self.secrets, "stream event", &e))?;
        if let Some(err) = event.error {
            return Err(envelope_error(
                &self.provider,
                &self.secrets,
                200,
                &err,
                data,
            ));
        }
        if !self.model_seen && event.model.is_some() {
            self.model_seen = true;
            self.model = event.model.filter(|m| !m.is_empty());
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
        // The first chunk delivered names the model; a chunk that is not
        // delivered (no progress) leaves it for the next.
        if let Some(reason) = finish {
            self.finished = true;
            chunk.model = self.model.take();
            return self.flush_tools(Some((chunk, reason)), out);
        }
        if progress {
            chunk.model = self.model.take();
            out.push(chunk);
        }
        Ok(())
    }

    fn tool_fragment(&mut self, t: ToolDelta) {
        let found = match (t.index, &t.id) {
            (Some(i), _) => self.by_index.get(&i).copied(),
            (None, Some(id)) => self.by_id.get(id).copied(),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let pos = match found {
            Some(pos) => pos,
            None => {
                let pos = self.tools.len();
                self.tools.push(PartialTool::default());
                if let Some(i) = t.index {
                    self.by_index.insert(i, pos);
                }
                pos
            }
        };
        let Some(slot) = self.tools.get_mut(pos) else {
            return;
        };
        if let Some(id) = t.id
            && slot.id != id
        {
            if self.by_id.get(&slot.id) == Some(&pos) {
                self.by_id.remove(&slot.id);
            }
            self.by_id.insert(id.clone(), pos);
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
        self.by_index.clear();
        self.by_id.clear();
        let calls = std::mem::take(&mut self.tools)
            .into_iter()
            .map(|p| {
                let arguments =
                    tool_arguments(&self.provider, &self.secrets, &p.name, &p.arguments)?;
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

impl SseDialect for OpenAiEvents {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        self.data(&event.data, out)
    }

    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done || self.finished {
            return self.flush_tools(None, out);
        }
        if self.events == 0 {
            return Err(LlmError::ParseError(format!(
                "{}: {NO_EVENT}",
                self.provider
            )));
        }
        Err(LlmError::ParseError(format!(
            "{}: the stream ended before [DONE]",
            self.provider
        )))
    }
}
