//! The provider contract, run over both HTTP adapters against a real HTTP
//! server on 127.0.0.1 (as `tests/waypoint_contract.rs` does for stores):
//! what a caller may rely on whichever provider answers. Each contract test
//! runs once per [`Dialect`]; the dialect only says how its provider
//! speaks. What only one wire format has (request encoding, typed error
//! codes) follows in a section per dialect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::{
    error::{LlmError, Transience},
    llm::{
        ANTHROPIC_DEFAULT_MAX_TOKENS, AnthropicLlmAdapter, FinishReason, LlmChunk, LlmMessage,
        LlmPort, LlmRequest, LlmUsage, OpenAiCompatibleLlmAdapter, ToolCall, ToolDefinition,
    },
};
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;
use support::http_server::{Recorded, Reply, TestServer, refused_url};
use support::secrets::{assert_no_fragment, secret_bodies};

/// A provider's wire format, as the contract tests need it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dialect {
    OpenAi,
    Anthropic,
}

use Dialect::{Anthropic, OpenAi};

const DIALECTS: [Dialect; 2] = [OpenAi, Anthropic];

impl Dialect {
    fn key(self) -> &'static str {
        match self {
            OpenAi => "sk-test-0123456789abcdefghij",
            Anthropic => "sk-ant-api03-0123456789abcdef",
        }
    }

    fn name(self) -> &'static str {
        match self {
            OpenAi => "openai",
            Anthropic => "anthropic",
        }
    }

    /// The adapter for the API root `base` (version segment included, the
    /// one convention of both adapters), without a key.
    fn bare(self, base: &str) -> Box<dyn LlmPort> {
        match self {
            OpenAi => Box::new(OpenAiCompatibleLlmAdapter::new(base).unwrap()),
            Anthropic => Box::new(AnthropicLlmAdapter::new(base).unwrap()),
        }
    }

    /// The adapter for `server`'s `/v1`, with this dialect's key.
    fn adapter(self, server: &TestServer) -> Box<dyn LlmPort> {
        let base = format!("{}/v1", server.url());
        match self {
            OpenAi => Box::new(
                OpenAiCompatibleLlmAdapter::new(base)
                    .unwrap()
                    .with_api_key(self.key()),
            ),
            Anthropic => Box::new(
                AnthropicLlmAdapter::new(base)
                    .unwrap()
                    .with_api_key(self.key()),
            ),
        }
    }

    /// The path requests go to, and the header carrying the key.
    fn endpoint(self) -> (&'static str, &'static str, String) {
        match self {
            OpenAi => (
                "/v1/chat/completions",
                "authorization",
                format!("Bearer {}", self.key()),
            ),
            Anthropic => ("/v1/messages", "x-api-key", self.key().to_string()),
        }
    }

    /// A 200 answering `text` (in two pieces) with a stop and usage.
    fn text_reply(self, model: &str, text: [&str; 2], usage: (u64, u64)) -> Value {
        match self {
            OpenAi => json!({
                "id": "c1", "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text.concat()}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
            }),
            Anthropic => json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text[0]}, {"type": "text", "text": text[1]}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": usage.0, "output_tokens": usage.1}
            }),
        }
    }

    /// A 200 calling one tool.
    fn tool_reply(self, call: &ToolCall) -> Value {
        match self {
            OpenAi => json!({
                "model": "m",
                "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments.to_string()}}
                ]}, "finish_reason": "tool_calls"}]
            }),
            Anthropic => json!({
                "model": "m", "type": "message", "role": "assistant",
                "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}],
                "stop_reason": "tool_use"
            }),
        }
    }

    fn event(self, data: Value) -> String {
        match self {
            OpenAi => format!("data: {data}\n\n"),
            Anthropic => format!(
                "event: {}\ndata: {data}\n\n",
                data["type"].as_str().unwrap()
            ),
        }
    }

    /// The stream's terminator, as truncation errors name it.
    fn terminator(self) -> &'static str {
        match self {
            OpenAi => "[DONE]",
            Anthropic => "message_stop",
        }
    }

    fn text_event(self, text: &str) -> String {
        self.event(match self {
            OpenAi => json!({"choices": [{"delta": {"content": text}}]}),
            Anthropic => json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
        })
    }

    /// A whole stream: `pieces` of text, a stop, usage, the terminator, and
    /// the keep-alives and comments providers send between.
    fn text_stream(self, pieces: &[&str], usage: (u64, u64)) -> String {
        let mut body = String::new();
        match self {
            OpenAi => {
                body.push_str(
                    &self.event(
                        json!({"model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]}),
                    ),
                );
                for p in pieces {
                    body.push_str(&self.text_event(p));
                }
                body.push_str(": keep-alive\r\n\r\n");
                body.push_str(&self.event(
                    json!({"model": "m", "choices": [{"delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1}}),
                ));
                body.push_str("data: [DONE]\n\n");
            }
            Anthropic => {
                body.push_str(&self.event(json!({"type": "message_start",
                    "message": {"model": "m", "usage": {"input_tokens": usage.0, "output_tokens": 1}}})));
                body.push_str(
                    &self.event(json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}})),
                );
                for p in pieces {
                    body.push_str(&self.text_event(p));
                }
                body.push_str(&self.event(json!({"type": "ping"})));
                body.push_str(": keep-alive\r\n\r\n");
                body.push_str(&self.event(json!({"type": "content_block_stop", "index": 0})));
                body.push_str(&self.event(json!({"type": "message_delta",
                    "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": usage.1}})));
                body.push_str(&self.event(json!({"type": "message_stop"})));
            }
        }
        body
    }

    /// A stream calling one tool, its arguments in `fragments`.
    fn tool_stream(self, id: &str, name: &str, fragments: &[&str]) -> String {
        let mut body = String::new();
        match self {
            OpenAi => {
                body.push_str(&self.event(json!({"choices": [{"delta": {"tool_calls": [
                    {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]})));
                for f in fragments {
                    body.push_str(&self.event(json!({"choices": [{"delta": {"tool_calls": [
                        {"index": 0, "function": {"arguments": f}}]}}]})));
                }
                body.push_str(
                    &self.event(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})),
                );
                body.push_str("data: [DONE]\n\n");
            }
            Anthropic => {
                body.push_str(
                    &self.event(json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})),
                );
                for f in fragments {
                    body.push_str(
                        &self.event(json!({"type": "content_block_delta", "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": f}})),
                    );
                }
                body.push_str(&self.event(json!({"type": "content_block_stop", "index": 1})));
                body.push_str(
                    &self.event(
                        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
                    ),
                );
                body.push_str(&self.event(json!({"type": "message_stop"})));
            }
        }
        body
    }

    /// An error envelope of the kind a server failure (a 500) is.
    fn server_error(self, message: &str) -> Value {
        match self {
            OpenAi => json!({"error": {"message": message, "type": "server_error"}}),
            Anthropic => {
                json!({"type": "error", "error": {"type": "api_error", "message": message}})
            }
        }
    }

    /// An authentication-error envelope echoing the key.
    fn auth_error(self) -> Value {
        let message = format!("Incorrect API key provided: {}", self.key());
        match self {
            OpenAi => json!({"error": {"message": message, "code": "invalid_api_key"}}),
            Anthropic => {
                json!({"type": "error", "error": {"type": "authentication_error", "message": message}})
            }
        }
    }
}

fn request() -> LlmRequest {
    LlmRequest::new(
        "model-test",
        vec![LlmMessage::system("be brief"), LlmMessage::user("hi")],
    )
}

async fn failing(d: Dialect, reply: Reply) -> LlmError {
    let server = TestServer::start(vec![reply]).await;
    d.adapter(&server).generate(&request()).await.unwrap_err()
}

/// Every item of a streamed call.
async fn stream_items(d: Dialect, reply: Reply) -> (Vec<Result<LlmChunk, LlmError>>, Recorded) {
    let server = TestServer::start(vec![reply]).await;
    let items = d
        .adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    (items, server.requests().remove(0))
}

// ---------------------------------------------------------------------------
// The contract
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_200_is_decoded_and_sent_to_the_endpoint_with_the_key() {
    for d in DIALECTS {
        let server = TestServer::start(vec![Reply::json(
            200,
            &d.text_reply("served-model", ["hel", "lo"], (5, 2)),
        )])
        .await;
        let r = d.adapter(&server).generate(&request()).await.unwrap();
        assert_eq!(r.content, "hello", "{d:?}");
        assert_eq!(r.model, "served-model");
        assert_eq!(r.finish_reason, Some(FinishReason::Stop));
        assert_eq!(r.usage, Some(LlmUsage::new(5, 2)));
        let sent = &server.requests()[0];
        let (path, header, value) = d.endpoint();
        assert_eq!(sent.method, "POST");
        assert_eq!(sent.path, path);
        assert_eq!(sent.headers[header], value);
        assert_eq!(sent.body["stream"], json!(false));
        assert_eq!(sent.body["model"], json!("model-test"));
    }
}

#[tokio::test]
async fn a_tool_call_is_decoded() {
    let call = ToolCall::new("call_1", "lookup", json!({"city": "Oslo"}));
    for d in DIALECTS {
        let server = TestServer::start(vec![Reply::json(200, &d.tool_reply(&call))]).await;
        let r = d.adapter(&server).generate(&request()).await.unwrap();
        assert_eq!(r.tool_calls, vec![call.clone()], "{d:?}");
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(r.content, "");
    }
}

#[tokio::test]
async fn a_stream_decodes_the_same_whatever_the_reads() {
    for d in DIALECTS {
        let body = d.text_stream(&["Hel", "lo"], (3, 2));
        for piece in [body.len(), 1, 7, 30] {
            let parts: Vec<String> = body
                .as_bytes()
                .chunks(piece)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            let (items, sent) =
                stream_items(d, Reply::sse(parts.iter().map(String::as_str).collect())).await;
            let chunks: Vec<LlmChunk> = items.into_iter().map(Result::unwrap).collect();
            let text: String = chunks.iter().map(|c| c.content.as_str()).collect();
            assert_eq!(text, "Hello", "{d:?} in pieces of {piece}");
            let mut usage = LlmUsage::default();
            for u in chunks.iter().filter_map(|c| c.usage.as_ref()) {
                usage.accumulate(u);
            }
            assert_eq!(usage.total_tokens(), 5, "{d:?}");
            assert_eq!(
                chunks.iter().rev().find_map(|c| c.finish_reason.clone()),
                Some(FinishReason::Stop)
            );
            // The stream names its model once, on the first chunk delivered
            // (OpenAI's first event, a bare role, delivers none itself).
            let named: Vec<Option<&str>> = chunks.iter().map(|c| c.model.as_deref()).collect();
            assert_eq!(named[0], Some("m"), "{d:?}: {named:?}");
            assert!(named[1..].iter().all(Option::is_none), "{d:?}: {named:?}");
            assert_eq!(sent.body["stream"], json!(true));
            assert_eq!(sent.headers["accept"], "text/event-stream");
        }
    }
}

#[tokio::test]
async fn streamed_tool_call_fragments_become_one_call() {
    for d in DIALECTS {
        let body = d.tool_stream("call_9", "lookup", &["{\"ci", "ty\":\"Oslo\"}"]);
        let (items, _) = stream_items(d, Reply::sse(vec![&body])).await;
        let chunks: Vec<LlmChunk> = items.into_iter().map(Result::unwrap).collect();
        let calls: Vec<&ToolCall> = chunks.iter().flat_map(|c| &c.tool_calls).collect();
        assert_eq!(
            calls,
            vec![&ToolCall::new("call_9", "lookup", json!({"city": "Oslo"}))],
            "{d:?}"
        );
        assert_eq!(
            chunks.iter().rev().find_map(|c| c.finish_reason.clone()),
            Some(FinishReason::ToolCalls)
        );
    }
}

#[tokio::test]
async fn a_401_is_a_permanent_authentication_error_without_the_key() {
    for d in DIALECTS {
        let e = failing(d, Reply::json(401, &d.auth_error())).await;
        let LlmError::AuthenticationError(message) = &e else {
            panic!("{d:?}: {e:?}")
        };
        assert!(!message.contains(d.key()), "{message}");
        assert!(message.contains("[REDACTED]"));
        assert_eq!(e.transience(), Transience::Permanent);
    }
}

#[tokio::test]
async fn a_429_carries_its_retry_hint() {
    for d in DIALECTS {
        let e = failing(d, Reply::body(429, "slow down").header("Retry-After", "17")).await;
        assert_eq!(
            e,
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(17))
            },
            "{d:?}"
        );
        assert_eq!(e.transience(), Transience::Transient);
        let e = failing(
            d,
            Reply::body(429, "").header("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),
        )
        .await;
        assert_eq!(
            e,
            LlmError::RateLimited {
                retry_after: Some(Duration::ZERO)
            }
        );
        let e = failing(d, Reply::body(429, "").header("retry-after-ms", "250")).await;
        assert_eq!(
            e,
            LlmError::RateLimited {
                retry_after: Some(Duration::from_millis(250))
            }
        );
    }
}

#[tokio::test]
async fn server_errors_are_transient_provider_errors_with_their_excerpt() {
    for d in DIALECTS {
        for status in [500, 502, 503, 529] {
            let e = failing(d, Reply::body(status, "upstream overloaded")).await;
            assert_eq!(
                e,
                LlmError::ProviderError {
                    provider: d.name().into(),
                    status,
                    message: "upstream overloaded".into(),
                    retry_after: None,
                },
                "{d:?}"
            );
            assert_eq!(e.transience(), Transience::Transient);
        }
        let e = failing(d, Reply::body(404, "no such model")).await;
        assert_eq!(e.status(), Some(404));
        assert_eq!(e.transience(), Transience::Permanent);
    }
}

#[tokio::test]
async fn secrets_in_error_bodies_never_survive() {
    for d in DIALECTS {
        for (body, secret) in secret_bodies() {
            assert!(body.chars().count() > 512);
            for status in [400, 401, 403, 500] {
                let e = failing(d, Reply::body(status, body.clone())).await;
                let message = match &e {
                    LlmError::ProviderError { message, .. }
                    | LlmError::AuthenticationError(message) => message.clone(),
                    other => panic!("{d:?}: {other:?}"),
                };
                assert!(message.chars().count() <= 512);
                assert_no_fragment(&message, &secret);
                assert_no_fragment(&e.to_string(), &secret);
                assert_no_fragment(&format!("{e:?}"), &secret);
            }
        }
    }
}

#[tokio::test]
async fn a_malformed_200_is_a_parse_error_of_unknown_transience() {
    for d in DIALECTS {
        for body in [
            "{\"choices\": [",
            "{\"content\": [{\"type\": \"text\"",
            "<html>gateway</html>",
        ] {
            let e = failing(d, Reply::body(200, body)).await;
            assert!(matches!(e, LlmError::ParseError(_)), "{d:?} {body}: {e:?}");
            assert_eq!(e.transience(), Transience::Unknown);
        }
    }
}

#[tokio::test]
async fn an_error_envelope_inside_a_200_is_an_error() {
    for d in DIALECTS {
        let e = failing(d, Reply::json(200, &d.server_error("internal"))).await;
        assert_eq!(e.status(), Some(500), "{d:?}: {e:?}");
        assert_eq!(e.transience(), Transience::Transient);
    }
}

#[tokio::test]
async fn an_error_event_mid_stream_follows_the_good_chunks() {
    for d in DIALECTS {
        let good = d.text_event("par");
        let bad = d.event(d.server_error("boom"));
        let (items, _) = stream_items(d, Reply::sse(vec![&good, &bad])).await;
        assert_eq!(items.len(), 2, "{d:?}: {items:?}");
        assert_eq!(items[0].as_ref().unwrap().content, "par");
        let e = items[1].as_ref().unwrap_err();
        assert_eq!(e.status(), Some(500));
        assert_eq!(e.transience(), Transience::Transient);
    }
}

#[tokio::test]
async fn malformed_sse_is_a_parse_error_after_the_good_chunks() {
    for d in DIALECTS {
        let good = d.text_event("ok");
        let (items, _) = stream_items(d, Reply::sse(vec![&good, "data: {not json}\n\n"])).await;
        assert_eq!(items.len(), 2, "{d:?}");
        assert_eq!(items[0].as_ref().unwrap().content, "ok");
        assert!(matches!(items[1], Err(LlmError::ParseError(_))));
    }
}

#[tokio::test]
async fn a_truncated_stream_is_a_parse_error_naming_the_terminator() {
    for d in DIALECTS {
        let good = d.text_event("par");
        let cut = &d.text_event("tial")[..20];
        let (items, _) = stream_items(d, Reply::sse(vec![&good, cut])).await;
        assert_eq!(items.len(), 2, "{d:?}: {items:?}");
        assert_eq!(items[0].as_ref().unwrap().content, "par");
        let Err(LlmError::ParseError(m)) = &items[1] else {
            panic!("{items:?}")
        };
        assert!(m.contains(d.terminator()), "{m}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_transient_network_error() {
    for d in DIALECTS {
        let adapter = d.bare(&format!("{}/v1", refused_url().await));
        let e = adapter.generate(&request()).await.unwrap_err();
        assert!(matches!(e, LlmError::NetworkError(_)), "{d:?}: {e:?}");
        assert_eq!(e.transience(), Transience::Transient);
        let Err(e) = adapter.generate_stream(&request()).await else {
            panic!("stream over a refused connection")
        };
        assert!(matches!(e, LlmError::NetworkError(_)), "{e:?}");
    }
}

#[tokio::test]
async fn a_failing_stream_request_maps_its_status() {
    for d in DIALECTS {
        let server = TestServer::start(vec![Reply::body(503, "overloaded")]).await;
        let Err(e) = d.adapter(&server).generate_stream(&request()).await else {
            panic!("503 stream")
        };
        assert_eq!(e.status(), Some(503), "{d:?}");
        assert_eq!(e.transience(), Transience::Transient);
    }
}

#[tokio::test]
async fn both_adapters_take_the_versioned_root_and_append_only_the_resource() {
    for d in DIALECTS {
        let (path, _, _) = d.endpoint();
        for base in ["/v1", "/v1/", "/proxy/v1"] {
            let server = TestServer::start(vec![Reply::json(
                200,
                &d.text_reply("m", ["a", "b"], (1, 1)),
            )])
            .await;
            d.bare(&format!("{}{base}", server.url()))
                .generate(&request())
                .await
                .unwrap();
            let want = format!(
                "{}{}",
                base.trim_end_matches('/').trim_end_matches("/v1"),
                path
            );
            assert_eq!(server.requests()[0].path, want, "{d:?} {base}");
        }
    }
}

#[test]
fn debug_hides_the_key_and_bad_urls_are_refused() {
    let openai = OpenAiCompatibleLlmAdapter::new("http://127.0.0.1:1/v1")
        .unwrap()
        .with_api_key(OpenAi.key());
    let anthropic = AnthropicLlmAdapter::new("http://127.0.0.1:1/v1")
        .unwrap()
        .with_api_key(Anthropic.key());
    for (d, debug) in [
        (OpenAi, format!("{openai:?}")),
        (Anthropic, format!("{anthropic:?}")),
    ] {
        assert!(!debug.contains(d.key()), "{debug}");
        assert!(debug.contains("REDACTED"));
    }
    for url in ["not a url", "ftp://127.0.0.1/"] {
        assert!(OpenAiCompatibleLlmAdapter::new(url).is_err());
        assert!(AnthropicLlmAdapter::new(url).is_err());
    }
}

// ---------------------------------------------------------------------------
// OpenAI-compatible only: request encoding and typed error codes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn openai_encodes_the_request_and_tool_turns() {
    let server = TestServer::start(vec![
        Reply::json(200, &OpenAi.text_reply("m", ["a", "b"], (1, 1))),
        Reply::json(200, &OpenAi.text_reply("m", ["a", "b"], (1, 1))),
    ])
    .await;
    let adapter = OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_model("gpt-override");
    let req = request()
        .with_temperature(0.5)
        .with_max_tokens(64)
        .with_stop(vec!["END".into()]);
    adapter.generate(&req).await.unwrap();
    adapter.generate(&tool_turns()).await.unwrap();
    let sent = server.requests();
    assert_eq!(
        sent[0].body,
        json!({
            "model": "gpt-override",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "temperature": 0.5, "max_tokens": 64, "stop": ["END"], "stream": false
        })
    );
    let body = &sent[1].body;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Bergen\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Tromsø\"}"}}
        ]})
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "content": "rain", "tool_call_id": "call_a"})
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "description": "weather by city", "parameters": {"type": "object"}}}])
    );
    // Said, not assumed: llama.cpp's Python server ignores tools without it.
    assert_eq!(body["tool_choice"], json!("auto"));
    assert!(sent[0].body.get("tool_choice").is_none());
    assert!(sent[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn openai_asks_for_usage_in_a_stream() {
    let (_, sent) = stream_items(
        OpenAi,
        Reply::sse(vec![
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        ]),
    )
    .await;
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn openai_resends_once_when_a_pooled_connection_was_closed_before_answering() {
    let reply = || Reply::json(200, &OpenAi.text_reply("m", ["fi", "ne"], (1, 1)));
    let server = TestServer::start_stale_keep_alive(reply(), vec![reply()]).await;
    let adapter = OpenAi.adapter(&server);
    adapter.generate(&request()).await.unwrap();
    // The pooled connection takes the request and closes unanswered: the
    // adapter sends it again, once, on a new connection.
    let r = adapter.generate(&request()).await.unwrap();
    assert_eq!(r.content, "fine");
    assert_eq!(server.requests().len(), 3);

    // Only once: a server that hangs up on the resend too is an error.
    let server =
        TestServer::start_stale_keep_alive(reply(), vec![Reply::body(200, "").hang_up()]).await;
    let adapter = OpenAi.adapter(&server);
    adapter.generate(&request()).await.unwrap();
    let e = adapter.generate(&request()).await.unwrap_err();
    assert!(matches!(e, LlmError::NetworkError(_)), "{e:?}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn openai_error_codes_map_to_their_variants() {
    // A 403 is a permanent provider error (a region, a model not allowed).
    let e = failing(OpenAi, Reply::body(403, "region not supported")).await;
    assert_eq!(e.status(), Some(403));
    assert_eq!(e.transience(), Transience::Permanent);
    // Inside a 200: the numeric code stands in for the status.
    let e = failing(
        OpenAi,
        Reply::json(
            200,
            &json!({"error": {"message": "upstream timeout", "code": 504}}),
        ),
    )
    .await;
    assert_eq!(e.status(), Some(504));
    // Inside a 200 with nothing typed: a failed 2xx, Unknown.
    let e = failing(
        OpenAi,
        Reply::json(200, &json!({"error": {"message": "hm"}})),
    )
    .await;
    assert_eq!(e.status(), Some(200));
    assert_eq!(e.transience(), Transience::Unknown);
    // Codes with a dedicated variant.
    let e = failing(
        OpenAi,
        Reply::json(
            400,
            &json!({"error": {"message": "too long", "code": "context_length_exceeded"}}),
        ),
    )
    .await;
    assert!(matches!(e, LlmError::ContextLengthExceeded(_)), "{e:?}");
    let e = failing(
        OpenAi,
        Reply::json(
            400,
            &json!({"error": {"message": "no", "code": "content_filter"}}),
        ),
    )
    .await;
    assert!(matches!(e, LlmError::ContentFiltered(_)), "{e:?}");
}

// ---------------------------------------------------------------------------
// Anthropic only: request encoding and typed error types
// ---------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_encodes_the_request_and_merges_tool_turns() {
    let server = TestServer::start(vec![
        Reply::json(200, &Anthropic.text_reply("m", ["a", "b"], (1, 1))),
        Reply::json(200, &Anthropic.text_reply("m", ["a", "b"], (1, 1))),
    ])
    .await;
    let adapter = Anthropic.adapter(&server);
    adapter
        .generate(&request().with_stop(vec!["END".into()]))
        .await
        .unwrap();
    adapter
        .generate(&tool_turns().with_max_tokens(100))
        .await
        .unwrap();
    let sent = server.requests();
    assert_eq!(sent[0].headers["anthropic-version"], "2023-06-01");
    assert!(!sent[0].headers.contains_key("authorization"));
    assert_eq!(
        sent[0].body,
        json!({
            "model": "model-test", "max_tokens": ANTHROPIC_DEFAULT_MAX_TOKENS,
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stop_sequences": ["END"], "stream": false
        })
    );
    let body = &sent[1].body;
    assert_eq!(body["max_tokens"], json!(100));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_a", "name": "lookup", "input": {"city": "Bergen"}},
                {"type": "tool_use", "id": "call_b", "name": "lookup", "input": {"city": "Tromsø"}}
            ]},
            // Consecutive tool results merge into one user turn.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "rain"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "snow"}
            ]}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"name": "lookup", "description": "weather by city", "input_schema": {"type": "object"}}])
    );
}

#[tokio::test]
async fn anthropic_permission_and_overload_map_by_type() {
    // A 403 is a permission problem of the key.
    let e = failing(
        Anthropic,
        Reply::json(403, &json!({"type": "error", "error": {"type": "permission_error", "message": "not allowed"}})),
    )
    .await;
    let LlmError::AuthenticationError(m) = &e else {
        panic!("{e:?}")
    };
    assert!(m.contains("permission denied"), "{m}");
    assert_eq!(e.transience(), Transience::Permanent);
    // An overloaded_error is an overload whatever status carried it, also mid-stream.
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let e = failing(Anthropic, Reply::json(400, &overloaded)).await;
    assert_eq!(e.status(), Some(529));
    assert_eq!(e.transience(), Transience::Transient);
    let (items, _) = stream_items(Anthropic, Reply::sse(vec![&Anthropic.event(overloaded)])).await;
    assert_eq!(items[0].as_ref().unwrap_err().status(), Some(529));
}

/// A conversation with an assistant turn calling two tools and their results.
fn tool_turns() -> LlmRequest {
    LlmRequest::new(
        "m",
        vec![
            LlmMessage::user("weather?"),
            LlmMessage::assistant_with_tool_calls(
                "",
                vec![
                    ToolCall::new("call_a", "lookup", json!({"city": "Bergen"})),
                    ToolCall::new("call_b", "lookup", json!({"city": "Tromsø"})),
                ],
            ),
            LlmMessage::tool("call_a", "rain"),
            LlmMessage::tool("call_b", "snow"),
        ],
    )
    .with_tools(vec![ToolDefinition::new(
        "lookup",
        "weather by city",
        json!({"type": "object"}),
    )])
}

// ---------------------------------------------------------------------------
// Recorded from llama.cpp's server (tests/fixtures/llama_cpp/README.md):
// what the real server does, replayed. tests/local_llm.rs runs the server.
// ---------------------------------------------------------------------------

const LLAMA_CPP_STREAM: &str = include_str!("fixtures/llama_cpp/stream_max_tokens_4.sse");
const LLAMA_CPP_OVERFLOW: &str = include_str!("fixtures/llama_cpp/context_overflow_400.json");

#[tokio::test]
async fn llama_cpp_a_recorded_stream_decodes_without_usage() {
    let (items, _) = stream_items(OpenAi, Reply::sse(vec![LLAMA_CPP_STREAM])).await;
    let chunks: Vec<LlmChunk> = items.into_iter().map(Result::unwrap).collect();
    // The role-only first delta is no chunk; one chunk per token; the
    // finish reason on an empty delta; no usage although asked for.
    let texts: Vec<&str> = chunks
        .iter()
        .filter(|c| !c.content.is_empty())
        .map(|c| c.content.as_str())
        .collect();
    assert_eq!(texts, ["x", "what", " about", " only"]);
    assert_eq!(
        chunks.last().and_then(|c| c.finish_reason.clone()),
        Some(FinishReason::Length)
    );
    assert!(chunks.iter().all(|c| c.usage.is_none()));
}

#[tokio::test]
async fn llama_cpp_context_overflow_is_typed_streamed_or_not() {
    // Not streamed: the OpenAI envelope with its code.
    let e = failing(OpenAi, Reply::body(400, LLAMA_CPP_OVERFLOW)).await;
    assert!(matches!(e, LlmError::ContextLengthExceeded(_)), "{e:?}");
    assert_eq!(e.transience(), Transience::Permanent);

    // Streamed: a 200 whose event stream is empty. The adapter asks again
    // without streaming and so learns the typed error.
    let server = TestServer::start(vec![
        Reply::sse(vec![]),
        Reply::body(400, LLAMA_CPP_OVERFLOW),
    ])
    .await;
    let e = OpenAi
        .adapter(&server)
        .generate_stream(&request())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, LlmError::ContextLengthExceeded(_)), "{e:?}");
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["stream"], json!(true));
    assert_eq!(sent[1].body["stream"], json!(false));

    // An empty stream from a server that then answers: the answer, whole.
    let server = TestServer::start(vec![
        Reply::sse(vec![]),
        Reply::json(200, &OpenAi.text_reply("m", ["a", "b"], (1, 1))),
    ])
    .await;
    let chunks: Vec<LlmChunk> = OpenAi
        .adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, "ab");
}

#[tokio::test]
async fn llama_cpp_a_recorded_tool_call_decodes() {
    // `content: null` and a legacy `function_call` (with an empty name)
    // beside `tool_calls`: the tool call is what counts.
    let server = TestServer::start(vec![Reply::body(
        200,
        include_str!("fixtures/llama_cpp/tool_call_auto.json"),
    )])
    .await;
    let r = OpenAi.adapter(&server).generate(&request()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.content, "");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "get_weather");
    assert_eq!(r.tool_calls[0].arguments, json!({"city": "Oslo"}));
    assert!(r.tool_calls[0].id.starts_with("call_"));
}
