//! The Anthropic Messages adapter against a real HTTP server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod support;

use aegis::{
    ANTHROPIC_DEFAULT_MAX_TOKENS, AnthropicAdapter, FinishReason, LlmChunk, LlmError, LlmMessage,
    LlmPort, LlmRequest, LlmUsage, ToolCall, ToolDefinition, Transience,
};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;
use support::http_server::{Reply, TestServer, refused_url};
use support::secrets::{assert_no_fragment, secret_bodies};

const KEY: &str = "sk-ant-api03-0123456789abcdef";

fn adapter(server: &TestServer) -> AnthropicAdapter {
    AnthropicAdapter::new(server.url())
        .unwrap()
        .with_api_key(KEY)
}

fn request() -> LlmRequest {
    LlmRequest::new(
        "claude-test",
        vec![LlmMessage::system("be brief"), LlmMessage::user("hi")],
    )
}

async fn failing(reply: Reply) -> LlmError {
    let server = TestServer::start(vec![reply]).await;
    adapter(&server).generate(&request()).await.unwrap_err()
}

fn event(kind: &str, data: serde_json::Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

#[tokio::test]
async fn a_200_is_decoded_and_the_request_is_well_formed() {
    let server = TestServer::start(vec![Reply::json(
        200,
        &json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-1",
            "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 9, "output_tokens": 2}
        }),
    )])
    .await;
    let r = adapter(&server)
        .generate(&request().with_stop(vec!["END".into()]))
        .await
        .unwrap();
    assert_eq!(r.content, "hello");
    assert_eq!(r.model, "claude-test-1");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        r.usage,
        Some(LlmUsage {
            prompt_tokens: 9,
            completion_tokens: 2
        })
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(!sent.headers.contains_key("authorization"));
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-test", "max_tokens": ANTHROPIC_DEFAULT_MAX_TOKENS,
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stop_sequences": ["END"], "stream": false
        })
    );
}

#[tokio::test]
async fn tool_use_is_decoded_and_tool_turns_encoded() {
    let server = TestServer::start(vec![Reply::json(
        200,
        &json!({
            "model": "m",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}}
            ],
            "stop_reason": "tool_use"
        }),
    )])
    .await;
    let req = LlmRequest::new(
        "m",
        vec![
            LlmMessage::user("weather?"),
            LlmMessage::assistant_with_tool_calls(
                "",
                vec![
                    ToolCall::new("toolu_a", "lookup", json!({"city": "Bergen"})),
                    ToolCall::new("toolu_b", "lookup", json!({"city": "Tromsø"})),
                ],
            ),
            LlmMessage::tool("toolu_a", "rain"),
            LlmMessage::tool("toolu_b", "snow"),
        ],
    )
    .with_max_tokens(100)
    .with_tools(vec![ToolDefinition {
        name: "lookup".into(),
        description: "weather by city".into(),
        parameters: json!({"type": "object"}),
    }]);
    let r = adapter(&server).generate(&req).await.unwrap();
    assert_eq!(r.content, "checking");
    assert_eq!(
        r.tool_calls,
        vec![ToolCall::new("toolu_1", "lookup", json!({"city": "Oslo"}))]
    );
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));

    let body = &server.requests()[0].body;
    assert_eq!(body["max_tokens"], json!(100));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"city": "Bergen"}},
                {"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"city": "Tromsø"}}
            ]},
            // Consecutive tool results merge into one user turn.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "rain"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "snow"}
            ]}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"name": "lookup", "description": "weather by city", "input_schema": {"type": "object"}}])
    );
}

#[tokio::test]
async fn streams_text_and_tool_use() {
    let start = event(
        "message_start",
        json!({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 11, "output_tokens": 1}}}),
    );
    let delta = event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
    );
    let (delta_head, delta_tail) = delta.split_at(30);
    let server = TestServer::start(vec![Reply::sse(vec![
        &start,
        &event("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        delta_head,
        delta_tail,
        &event("ping", json!({"type": "ping"})),
        &event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        &event("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_7", "name": "lookup", "input": {}}})),
        &event("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Os"}})),
        &event("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "lo\"}"}})),
        &event("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        &event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 15}})),
        &event("message_stop", json!({"type": "message_stop"})),
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    let chunks: Vec<LlmChunk> = items.into_iter().map(Result::unwrap).collect();
    let text: String = chunks.iter().map(|c| c.content.as_str()).collect();
    assert_eq!(text, "Hi");
    let calls: Vec<&ToolCall> = chunks.iter().flat_map(|c| &c.tool_calls).collect();
    assert_eq!(
        calls,
        vec![&ToolCall::new("toolu_7", "lookup", json!({"city": "Oslo"}))]
    );
    let mut usage = LlmUsage::default();
    for c in &chunks {
        if let Some(u) = &c.usage {
            usage.accumulate(u);
        }
    }
    assert_eq!(
        usage,
        LlmUsage {
            prompt_tokens: 11,
            completion_tokens: 15
        }
    );
    assert_eq!(
        chunks.iter().rev().find_map(|c| c.finish_reason.clone()),
        Some(FinishReason::ToolCalls)
    );
    assert_eq!(server.requests()[0].body["stream"], json!(true));
}

#[tokio::test]
async fn a_401_is_an_authentication_error() {
    let e = failing(Reply::json(
        401,
        &json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key: {KEY}")}}),
    ))
    .await;
    let LlmError::AuthenticationError(m) = &e else {
        panic!("{e:?}")
    };
    assert!(!m.contains(KEY), "{m}");
    assert_eq!(e.transience(), Transience::Permanent);
}

#[tokio::test]
async fn a_403_is_a_permission_problem_of_the_key() {
    let e = failing(Reply::json(
        403,
        &json!({"type": "error", "error": {"type": "permission_error", "message": "not allowed"}}),
    ))
    .await;
    let LlmError::AuthenticationError(m) = &e else {
        panic!("{e:?}")
    };
    assert!(m.contains("permission denied"), "{m}");
    assert_eq!(e.transience(), Transience::Permanent);
}

#[tokio::test]
async fn a_429_carries_retry_after() {
    let e = failing(
        Reply::json(
            429,
            &json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}),
        )
        .header("retry-after", "30"),
    )
    .await;
    assert_eq!(
        e,
        LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        }
    );
}

#[tokio::test]
async fn server_errors_and_overload_are_transient() {
    for status in [500, 503, 529] {
        let e = failing(Reply::body(status, "busy")).await;
        assert_eq!(e.status(), Some(status));
        assert_eq!(e.transience(), Transience::Transient);
    }
    // An overloaded_error is an overload whatever status carried it.
    let e = failing(Reply::json(
        400,
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ))
    .await;
    assert_eq!(e.status(), Some(529));
    assert_eq!(e.transience(), Transience::Transient);
}

#[tokio::test]
async fn secrets_in_error_bodies_never_survive() {
    for (body, secret) in secret_bodies() {
        for status in [400, 401, 403, 500] {
            let e = failing(Reply::body(status, body.clone())).await;
            let message = match &e {
                LlmError::ProviderError { message, .. }
                | LlmError::AuthenticationError(message) => message.clone(),
                other => panic!("{other:?}"),
            };
            assert!(message.chars().count() <= 512);
            assert_no_fragment(&message, &secret);
            assert_no_fragment(&format!("{e:?}"), &secret);
        }
    }
}

#[tokio::test]
async fn envelopes_inside_a_200_and_mid_stream_are_errors() {
    let e = failing(Reply::json(
        200,
        &json!({"type": "error", "error": {"type": "api_error", "message": "internal"}}),
    ))
    .await;
    assert_eq!(e.status(), Some(500));

    let server = TestServer::start(vec![Reply::sse(vec![
        &event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "par"}}),
        ),
        &event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap().content, "par");
    let e = items[1].as_ref().unwrap_err();
    assert_eq!(e.status(), Some(529));
    assert_eq!(e.transience(), Transience::Transient);
}

#[tokio::test]
async fn malformed_json_and_truncated_streams_are_parse_errors() {
    let e = failing(Reply::body(200, "{\"content\": [{\"type\": \"text\"")).await;
    assert!(matches!(e, LlmError::ParseError(_)), "{e:?}");

    let server = TestServer::start(vec![Reply::sse(vec![
        &event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "cut"}}),
        ),
        "event: content_block_delta\ndata: {\"type\":",
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2, "{items:?}");
    let Err(LlmError::ParseError(m)) = &items[1] else {
        panic!("{items:?}")
    };
    assert!(m.contains("message_stop"), "{m}");
}

#[tokio::test]
async fn a_refused_connection_is_a_transient_network_error() {
    let adapter = AnthropicAdapter::new(refused_url().await).unwrap();
    let e = adapter.generate(&request()).await.unwrap_err();
    assert!(matches!(e, LlmError::NetworkError(_)), "{e:?}");
    assert_eq!(e.transience(), Transience::Transient);
}
