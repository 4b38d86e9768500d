//! Messages API streaming: typed events from `message_start` to
//! `message_stop`, with tool input arriving as JSON fragments.

use serde::Deserialize;
use serde_json::Value;

use super::wire::{WireError, WireUsage, envelope_error, parse_error, stop_reason, tool_arguments};
use crate::error::LlmError;
use crate::llm::sse::{SseDecoder, SseEvent, StreamParser};
use crate::llm::{LlmChunk, LlmUsage, ToolCall};

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: u64,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDelta>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug)]
struct PartialTool {
    index: u64,
    id: String,
    name: String,
    /// The input the block started with, used when no fragments follow.
    initial: Value,
    json: String,
}

/// Parses an Anthropic Messages event stream into [`LlmChunk`]s.
///
/// Text deltas become text chunks; `input_json_delta` fragments become empty
/// (progress) chunks and the tool call is delivered whole when its block
/// stops. Input tokens arrive on the first chunk, output tokens with the
/// stop reason. An `error` event is mapped like an error body (an
/// `overloaded_error` is a 529); invalid JSON is a
/// [`LlmError::ParseError`]; a body that ends before `message_stop` is a
/// truncated stream, also a `ParseError`.
///
/// ```
/// use aegis_runtime::{AnthropicStreamParser, StreamParser};
/// let mut p = AnthropicStreamParser::new("anthropic");
/// let mut chunks = Vec::new();
/// p.push(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n", &mut chunks).unwrap();
/// p.push(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", &mut chunks).unwrap();
/// p.finish(&mut chunks).unwrap();
/// assert_eq!(chunks[0].content, "Hi");
/// ```
#[derive(Debug)]
pub struct AnthropicStreamParser {
    provider: String,
    sse: SseDecoder,
    events: Vec<SseEvent>,
    tools: Vec<PartialTool>,
    done: bool,
}

impl AnthropicStreamParser {
    /// A parser for a stream from `provider` (named in errors).
    pub fn new(provider: impl Into<String>) -> Self {
        AnthropicStreamParser {
            provider: provider.into(),
            sse: SseDecoder::new(),
            events: Vec::new(),
            tools: Vec::new(),
            done: false,
        }
    }

    fn event(&mut self, data: &str, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        let event: StreamEvent = serde_json::from_str(data)
            .map_err(|e| parse_error(&self.provider, "stream event", &e))?;
        match event {
            StreamEvent::MessageStart { message } => {
                let prompt = message.usage.and_then(|u| u.input_tokens).unwrap_or(0);
                out.push(LlmChunk {
                    usage: Some(LlmUsage {
                        prompt_tokens: prompt,
                        completion_tokens: 0,
                    }),
                    ..Default::default()
                });
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                BlockStart::Text { text } if !text.is_empty() => out.push(LlmChunk::text(text)),
                BlockStart::ToolUse { id, name, input } => {
                    self.tools.push(PartialTool {
                        index,
                        id,
                        name,
                        initial: input,
                        json: String::new(),
                    });
                    out.push(LlmChunk::default());
                }
                _ => {}
            },
            StreamEvent::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => out.push(LlmChunk::text(text)),
                BlockDelta::InputJsonDelta { partial_json } => {
                    if let Some(t) = self.tools.iter_mut().find(|t| t.index == index) {
                        t.json.push_str(&partial_json);
                    }
                    out.push(LlmChunk::default());
                }
                BlockDelta::Other => out.push(LlmChunk::default()),
            },
            StreamEvent::ContentBlockStop { index } => {
                if let Some(pos) = self.tools.iter().position(|t| t.index == index) {
                    let t = self.tools.remove(pos);
                    let arguments = if t.json.trim().is_empty() {
                        match t.initial {
                            Value::Null => Value::Object(Default::default()),
                            v => v,
                        }
                    } else {
                        tool_arguments(&self.provider, &t.name, &t.json)?
                    };
                    out.push(LlmChunk {
                        tool_calls: vec![ToolCall {
                            id: t.id,
                            name: t.name,
                            arguments,
                        }],
                        ..Default::default()
                    });
                }
            }
            StreamEvent::MessageDelta { delta, usage } => {
                out.push(LlmChunk {
                    finish_reason: delta
                        .and_then(|d| d.stop_reason)
                        .as_deref()
                        .map(stop_reason),
                    usage: usage.map(|u| LlmUsage {
                        prompt_tokens: 0,
                        completion_tokens: u.output_tokens.unwrap_or(0),
                    }),
                    ..Default::default()
                });
            }
            StreamEvent::MessageStop => self.done = true,
            StreamEvent::Error { error } => {
                return Err(envelope_error(&self.provider, &error, data));
            }
            StreamEvent::Ping | StreamEvent::Unknown => {}
        }
        Ok(())
    }
}

impl StreamParser for AnthropicStreamParser {
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

    fn finish(&mut self, _out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::ParseError(format!(
            "{}: the stream ended before message_stop",
            self.provider
        )))
    }
}
