//! The Messages API wire format: request encoding, response decoding and
//! the error envelope.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{KnownSecrets, LlmError, bound_excerpt};
pub(crate) use crate::llm::decode::{parse_error, tool_arguments};
use crate::llm::{FinishReason, LlmRequest, LlmResponse, LlmRole, LlmUsage, ToolCall};

/// The `max_tokens` sent when a request sets none (the API requires one).
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

/// Encodes `request` as a Messages API body for `model`.
///
/// System messages become the top-level `system` prompt; tool results are
/// user turns of `tool_result` blocks; consecutive turns of one role merge,
/// because the API requires user and assistant turns to alternate.
pub(crate) fn encode_request(
    request: &LlmRequest,
    model: &str,
    stream: bool,
) -> Result<Vec<u8>, LlmError> {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == LlmRole::System)
        .map(|m| m.content.as_str())
        .collect();
    let mut messages: Vec<WireMessage<'_>> = Vec::new();
    for m in request
        .messages
        .iter()
        .filter(|m| m.role != LlmRole::System)
    {
        let (role, mut blocks) = match m.role {
            LlmRole::Tool => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: m.tool_call_id.as_deref().unwrap_or_default(),
                    content: &m.content,
                }],
            ),
            LlmRole::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(Block::Text { text: &m.content });
                }
                blocks.extend(m.tool_calls.iter().map(|c| Block::ToolUse {
                    id: &c.id,
                    name: &c.name,
                    input: &c.arguments,
                }));
                ("assistant", blocks)
            }
            LlmRole::User | LlmRole::System => ("user", vec![Block::Text { text: &m.content }]),
        };
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.append(&mut blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    let body = MessagesRequest {
        model,
        max_tokens: request.max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        temperature: request.temperature,
        stop_sequences: &request.stop,
        tools: request
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.parameters,
            })
            .collect(),
        stream,
    };
    serde_json::to_vec(&body)
        .map_err(|e| LlmError::InvalidRequest(format!("could not encode the request: {e}")))
}

/// The `error` object of an `{"type": "error", "error": {...}}` envelope.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct WireError {
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
    /// Prompt tokens written to the prompt cache: read, and billed, apart
    /// from `input_tokens`.
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the prompt cache, likewise.
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Every prompt token the model read: fresh, cache-written and
    /// cache-read (the API reports them apart).
    pub(crate) fn prompt_tokens(&self) -> u64 {
        [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ]
        .into_iter()
        .flatten()
        .fold(0u64, u64::saturating_add)
    }
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default)]
    model: String,
    /// No default: a 200 without `content` (`{}`, `{"status":"queued"}`)
    /// is not a completion, and must not read as an empty answer.
    #[serde(default)]
    content: Option<Vec<ContentBlock>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentBlock {
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

pub(crate) fn stop_reason(s: &str) -> FinishReason {
    match s {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// Decodes a 200 body. An error envelope inside it is an error.
pub(crate) fn decode_response(
    provider: &str,
    secrets: &KnownSecrets,
    body: &[u8],
) -> Result<LlmResponse, LlmError> {
    let parsed: MessagesResponse =
        serde_json::from_slice(body).map_err(|e| parse_error(provider, secrets, "response", &e))?;
    if let Some(err) = parsed.error {
        return Err(envelope_error(
            provider,
            secrets,
            &err,
            &String::from_utf8_lossy(body),
        ));
    }
    let Some(content) = parsed.content else {
        return Err(LlmError::ParseError(format!(
            "{provider}: the response is not a message (no `content`)"
        )));
    };
    let mut response = LlmResponse {
        model: parsed.model,
        finish_reason: parsed.stop_reason.as_deref().map(stop_reason),
        usage: parsed.usage.map(|u| LlmUsage {
            prompt_tokens: u.prompt_tokens(),
            completion_tokens: u.output_tokens.unwrap_or(0),
        }),
        ..Default::default()
    };
    for block in content {
        match block {
            ContentBlock::Text { text } => response.content.push_str(&text),
            ContentBlock::ToolUse { id, name, input } => {
                let arguments = match input {
                    Value::Null => Value::Object(Default::default()),
                    v => v,
                };
                response.tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments,
                });
            }
            ContentBlock::Other => {}
        }
    }
    Ok(response)
}

/// The HTTP status the Messages API documents for each error type.
fn status_of(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// A 403 from Anthropic is a `permission_error`: the key is not allowed to
/// use the resource, a credential problem rather than a malformed request.
fn permission_denied(provider: &str, secrets: &KnownSecrets, body: &str) -> LlmError {
    LlmError::AuthenticationError(bound_excerpt(&format!(
        "{provider}: permission denied: {}",
        secrets.redact(body)
    )))
}

/// The adapter-specific pre-check of a non-2xx body, ahead of the shared
/// table: a 403 is a credential problem, and an `overloaded_error` is an
/// overload (529) whatever status carried it.
pub(crate) fn pre_check(
    provider: &str,
    secrets: &KnownSecrets,
    status: u16,
    body: &str,
) -> Option<LlmError> {
    if status == 403 {
        return Some(permission_denied(provider, secrets, body));
    }
    #[derive(Deserialize)]
    struct Envelope {
        error: WireError,
    }
    let envelope: Envelope = serde_json::from_str(body).ok()?;
    (envelope.error.kind.as_deref() == Some("overloaded_error") && status != 529)
        .then(|| secrets.map_http_status(provider, 529, body, &[]))
}

/// An error envelope inside a 200 body or an event stream: its type says
/// which status it stands for (an unknown type is a failed 2xx, Unknown).
pub(crate) fn envelope_error(
    provider: &str,
    secrets: &KnownSecrets,
    err: &WireError,
    raw: &str,
) -> LlmError {
    let status = err.kind.as_deref().and_then(status_of).unwrap_or(200);
    pre_check(provider, secrets, status, raw)
        .unwrap_or_else(|| secrets.map_http_status(provider, status, raw, &[]))
}
