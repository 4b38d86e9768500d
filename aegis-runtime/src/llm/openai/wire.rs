//! The chat-completions wire format: request encoding, response decoding and
//! the error envelope.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{KnownSecrets, LlmError};
pub(crate) use crate::llm::decode::{parse_error, tool_arguments};
use crate::llm::{FinishReason, LlmMessage, LlmRequest, LlmResponse, LlmRole, LlmUsage, ToolCall};

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    /// `"auto"` whenever there are tools. OpenAI and vLLM assume it; the
    /// llama.cpp Python server's function-calling formats ignore the tools
    /// unless it is said.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    stream: bool,
    /// Only when streaming: ask for the usage chunk. Without it OpenAI,
    /// vLLM and llama.cpp's servers report no usage in a stream at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionDef<'a>,
}

#[derive(Serialize)]
struct WireFunctionDef<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

fn wire_message(m: &LlmMessage) -> WireMessage<'_> {
    let role = match m.role {
        LlmRole::System => "system",
        LlmRole::User => "user",
        LlmRole::Assistant => "assistant",
        LlmRole::Tool => "tool",
    };
    // An assistant turn that only calls tools says `""`: OpenAI takes
    // `null` or `""`, but llama.cpp's Python server refuses `null` (and
    // fails on a missing field), so the one every server takes.
    let content = &*m.content;
    WireMessage {
        role,
        content,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| WireToolCall {
                id: &c.id,
                kind: "function",
                function: WireFunctionCall {
                    name: &c.name,
                    arguments: c.arguments.to_string(),
                },
            })
            .collect(),
        tool_call_id: m.tool_call_id.as_deref(),
    }
}

/// Encodes `request` as a chat-completions body for `model`.
pub(crate) fn encode_request(
    request: &LlmRequest,
    model: &str,
    stream: bool,
) -> Result<Vec<u8>, LlmError> {
    let body = ChatRequest {
        model,
        messages: request.messages.iter().map(wire_message).collect(),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
        stop: &request.stop,
        tools: request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunctionDef {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        tool_choice: (!request.tools.is_empty()).then_some("auto"),
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    serde_json::to_vec(&body)
        .map_err(|e| LlmError::InvalidRequest(format!("could not encode the request: {e}")))
}

/// The `error` object OpenAI-compatible servers answer with.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct WireError {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<WireError>,
}

#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for LlmUsage {
    fn from(u: WireUsage) -> Self {
        LlmUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        }
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    model: String,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ResponseToolCall>,
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: String,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

pub(crate) fn finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// Decodes a 200 body. An error envelope inside it is an error.
pub(crate) fn decode_response(
    provider: &str,
    secrets: &KnownSecrets,
    status: u16,
    body: &[u8],
) -> Result<LlmResponse, LlmError> {
    let parsed: ChatResponse =
        serde_json::from_slice(body).map_err(|e| parse_error(provider, secrets, "response", &e))?;
    if let Some(err) = parsed.error {
        return Err(envelope_error(
            provider,
            secrets,
            status,
            &err,
            &String::from_utf8_lossy(body),
        ));
    }
    let Some(choice) = parsed.choices.into_iter().next() else {
        return Err(LlmError::ParseError(format!(
            "{provider}: response has no choices"
        )));
    };
    let tool_calls = choice
        .message
        .tool_calls
        .into_iter()
        .map(|c| {
            let arguments =
                tool_arguments(provider, secrets, &c.function.name, &c.function.arguments)?;
            Ok(ToolCall {
                id: c.id,
                name: c.function.name,
                arguments,
            })
        })
        .collect::<Result<Vec<_>, LlmError>>()?;
    Ok(LlmResponse {
        content: choice.message.content.unwrap_or_default(),
        tool_calls,
        usage: parsed.usage.map(LlmUsage::from),
        model: parsed.model,
        finish_reason: choice.finish_reason.as_deref().map(finish_reason),
        metadata: Default::default(),
    })
}

/// The adapter-specific pre-check of a non-2xx body: error codes with a
/// dedicated variant. Everything else is left to `map_http_status`.
pub(crate) fn pre_check(
    provider: &str,
    secrets: &KnownSecrets,
    _status: u16,
    body: &str,
) -> Option<LlmError> {
    let envelope: ErrorEnvelope = serde_json::from_str(body).ok()?;
    dedicated(provider, secrets, &envelope.error?)
}

fn dedicated(provider: &str, secrets: &KnownSecrets, err: &WireError) -> Option<LlmError> {
    let code = err.code.as_ref().and_then(Value::as_str);
    let message = || {
        secrets.redact_excerpt(&format!(
            "{provider}: {}",
            err.message.as_deref().or(code).unwrap_or("no message")
        ))
    };
    // OpenAI's "out of credit" 429: no wait refills the account.
    if code == Some("insufficient_quota") || err.kind.as_deref() == Some("insufficient_quota") {
        return Some(LlmError::QuotaExceeded(message()));
    }
    match code? {
        "context_length_exceeded" => Some(LlmError::ContextLengthExceeded(message())),
        "content_filter" | "content_policy_violation" => Some(LlmError::ContentFiltered(message())),
        _ => None,
    }
}

/// An error envelope that arrived with a success status (some proxies and
/// servers do this, also mid-stream). Its numeric `code`, or a
/// `server_error` type, stands in for the status; otherwise the 2xx status
/// itself goes to the table, which classifies a failed 2xx as Unknown.
pub(crate) fn envelope_error(
    provider: &str,
    secrets: &KnownSecrets,
    status: u16,
    err: &WireError,
    raw: &str,
) -> LlmError {
    if let Some(e) = dedicated(provider, secrets, err) {
        return e;
    }
    let numeric = err
        .code
        .as_ref()
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (100..=599).contains(c));
    let status = numeric.unwrap_or(match err.kind.as_deref() {
        Some("server_error") => 500,
        _ => status,
    });
    secrets.map_http_status(provider, status, raw, &[])
}
