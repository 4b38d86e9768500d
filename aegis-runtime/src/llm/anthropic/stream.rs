//! Messages API streaming: typed events from `message_start` to
//! `message_stop`, with tool input arriving as JSON fragments.

use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

use super::wire::{WireError, WireUsage, envelope_error, parse_error, stop_reason, tool_arguments};
use crate::error::{KnownSecrets, LlmError};
use crate::llm::sse::{SseDialect, SseEvent, SseStreamParser};
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
    model: Option<String>,
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
    id: String,
    name: String,
    /// The input the block started with, used when no fragments follow.
    initial: Value,
    json: String,
}

/// Parses an Anthropic Messages event stream into [`LlmChunk`]s: the shared
/// SSE framing with the [`AnthropicEvents`] dialect.
///
/// Text deltas become text chunks; `input_json_delta` fragments become empty
/// (progress) chunks and the tool call is delivered whole when its block
/// stops (each fragment finds its block by index in constant time). Input tokens arrive on the first chunk, output tokens with the
/// stop reason. An `error` event is mapped like an error body (an
/// `overloaded_error` is a 529); invalid JSON is a
/// [`LlmError::ParseError`]; a body that ends before `message_stop` is a
/// truncated stream, also a `ParseError`.
///
/// ```
/// use aegis_runtime::__internal::{AnthropicStreamParser, StreamParser};
/// let mut p = AnthropicStreamParser::new("anthropic");
/// let mut chunks = Vec::new();
/// p.push(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n", &mut chunks).unwrap();
/// p.push(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", &mut chunks).unwrap();
/// p.finish(&mut chunks).unwrap();
/// assert_eq!(chunks[0].content, "Hi");
/// ```
#[doc(hidden)]
pub type AnthropicStreamParser = SseStreamParser<AnthropicEvents>;

impl AnthropicStreamParser {
    /// A parser for a stream from `provider` (named in errors).
    pub fn new(provider: impl Into<String>) -> Self {
        SseStreamParser::from_dialect(AnthropicEvents {
            provider: provider.into(),
            secrets: KnownSecrets::default(),
            tools: HashMap::new(),
            done: false,
        })
    }

    /// Removes `secrets` from every error this parser returns, before it is
    /// bounded (the adapters pass their key and registered secrets).
    pub fn with_secrets(mut self, secrets: KnownSecrets) -> Self {
        self.dialect.secrets = secrets;
        self
    }
}

/// The Messages API events of an [`AnthropicStreamParser`].
#[derive(Debug)]
#[doc(hidden)]
pub struct AnthropicEvents {
    provider: String,
    secrets: KnownSecrets,
    /// Open tool-use blocks by their content-block index.
    tools: HashMap<u64, PartialTool>,
    done: bool,
}

impl AnthropicEvents {
    fn data(&mut self, data: &str, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        let event: StreamEvent = serde_json::from_str(data)
            .map_err(|e| parse_error(&self.provider, &self.secrets, "stream event", &e))?;
        match event {
            StreamEvent::MessageStart { message } => {
                let prompt = message.usage.map_or(0, |u| u.prompt_tokens());
                out.push(LlmChunk {
                    usage: Some(LlmUsage {
                        prompt_tokens: prompt,
                        completion_tokens: 0,
                    }),
                    model: message.model.filter(|m| !m.is_empty()),
                    ..Default::default()
                });
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                BlockStart::Text { text } if !text.is_empty() => out.push(LlmChunk::text(text)),
                BlockStart::ToolUse { id, name, input } => {
                    self.tools.insert(
                        index,
                        PartialTool {
                            id,
                            name,
                            initial: input,
                            json: String::new(),
                        },
                    );
                    out.push(LlmChunk::default());
                }
                _ => {}
            },
            StreamEvent::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => out.push(LlmChunk::text(text)),
                BlockDelta::InputJsonDelta { partial_json } => {
                    if let Some(t) = self.tools.get_mut(&index) {
                        t.json.push_str(&partial_json);
                    }
                    out.push(LlmChunk::default());
                }
                BlockDelta::Other => out.push(LlmChunk::default()),
            },
            StreamEvent::ContentBlockStop { index } => {
                if let Some(t) = self.tools.remove(&index) {
                    let arguments = if t.json.trim().is_empty() {
                        match t.initial {
                            Value::Null => Value::Object(Default::default()),
                            v => v,
                        }
                    } else {
                        tool_arguments(&self.provider, &self.secrets, &t.name, &t.json)?
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
                return Err(envelope_error(&self.provider, &self.secrets, &error, data));
            }
            StreamEvent::Ping | StreamEvent::Unknown => {}
        }
        Ok(())
    }
}

impl SseDialect for AnthropicEvents {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        self.data(&event.data, out)
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
