//! The OpenAI-compatible adapter against a real HTTP server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod support;

use aegis::{
    FinishReason, LlmChunk, LlmError, LlmMessage, LlmPort, LlmRequest, LlmUsage,
    OpenAiCompatibleAdapter, ToolCall, ToolDefinition, Transience,
};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;
use support::http_server::{Reply, TestServer, refused_url};
use support::secrets::{assert_no_fragment, secret_bodies};

const KEY: &str = "sk-test-0123456789abcdefghij";

fn adapter(server: &TestServer) -> OpenAiCompatibleAdapter {
    OpenAiCompatibleAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_api_key(KEY)
}

fn request() -> LlmRequest {
    LlmRequest::new(
        "gpt-test",
        vec![LlmMessage::system("be brief"), LlmMessage::user("hi")],
    )
}

async fn failing(reply: Reply) -> LlmError {
    let server = TestServer::start(vec![reply]).await;
    adapter(&server).generate(&request()).await.unwrap_err()
}

#[tokio::test]
async fn a_200_is_decoded_and_the_request_is_well_formed() {
    let server = TestServer::start(vec![Reply::json(
        200,
        &json!({
            "id": "c1", "model": "gpt-test-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        }),
    )])
    .await;
    let adapter = adapter(&server).with_model("gpt-override");
    let req = request()
        .with_temperature(0.5)
        .with_max_tokens(64)
        .with_stop(vec!["END".into()]);
    let r = adapter.generate(&req).await.unwrap();
    assert_eq!(r.content, "hello");
    assert_eq!(r.model, "gpt-test-2024");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        r.usage,
        Some(LlmUsage {
            prompt_tokens: 5,
            completion_tokens: 2
        })
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-override",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "temperature": 0.5, "max_tokens": 64, "stop": ["END"], "stream": false
        })
    );
}

#[tokio::test]
async fn tool_calls_are_decoded_and_tool_turns_encoded() {
    let server = TestServer::start(vec![Reply::json(
        200,
        &json!({
            "model": "m",
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Oslo\"}"}}
            ]}, "finish_reason": "tool_calls"}]
        }),
    )])
    .await;
    let req = LlmRequest::new(
        "m",
        vec![
            LlmMessage::user("weather?"),
            LlmMessage::assistant_with_tool_calls(
                "",
                vec![ToolCall::new("call_0", "lookup", json!({"city": "Bergen"}))],
            ),
            LlmMessage::tool("call_0", "rain"),
        ],
    )
    .with_tools(vec![ToolDefinition {
        name: "lookup".into(),
        description: "weather by city".into(),
        parameters: json!({"type": "object"}),
    }]);
    let r = adapter(&server).generate(&req).await.unwrap();
    assert_eq!(
        r.tool_calls,
        vec![ToolCall::new("call_1", "lookup", json!({"city": "Oslo"}))]
    );
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.content, "");

    let body = &server.requests()[0].body;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Bergen\"}"}}
        ]})
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "content": "rain", "tool_call_id": "call_0"})
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "description": "weather by city", "parameters": {"type": "object"}}}])
    );
}

#[tokio::test]
async fn streams_text_split_across_reads() {
    let server = TestServer::start(vec![Reply::sse(vec![
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choi",
        "ces\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n",
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    ])])
    .await;
    let stream = adapter(&server).generate_stream(&request()).await.unwrap();
    let chunks: Vec<LlmChunk> = stream
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let text: String = chunks.iter().map(|c| c.content.as_str()).collect();
    assert_eq!(text, "Hello");
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.usage.unwrap().total_tokens(), 5);

    let sent = &server.requests()[0];
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.headers["accept"], "text/event-stream");
}

#[tokio::test]
async fn streams_tool_call_fragments_into_one_call() {
    let server = TestServer::start(vec![Reply::sse(vec![
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"ci\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Oslo\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    ])])
    .await;
    let stream = adapter(&server).generate_stream(&request()).await.unwrap();
    let chunks: Vec<LlmChunk> = stream
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let calls: Vec<&ToolCall> = chunks.iter().flat_map(|c| &c.tool_calls).collect();
    assert_eq!(
        calls,
        vec![&ToolCall::new("call_9", "lookup", json!({"city": "Oslo"}))]
    );
    // Every fragment was a progress chunk; the call lands with the finish.
    assert_eq!(chunks.len(), 4);
    assert_eq!(
        chunks.last().unwrap().finish_reason,
        Some(FinishReason::ToolCalls)
    );
}

#[tokio::test]
async fn a_401_is_an_authentication_error() {
    let e = failing(Reply::json(
        401,
        &json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "code": "invalid_api_key"}}),
    ))
    .await;
    let LlmError::AuthenticationError(message) = &e else {
        panic!("{e:?}")
    };
    assert!(!message.contains(KEY), "{message}");
    assert!(message.contains("[REDACTED]"));
    assert_eq!(e.transience(), Transience::Permanent);
}

#[tokio::test]
async fn a_403_is_a_permanent_provider_error() {
    let e = failing(Reply::body(403, "region not supported")).await;
    assert_eq!(
        e,
        LlmError::ProviderError {
            provider: "openai".into(),
            status: 403,
            message: "region not supported".into()
        }
    );
    assert_eq!(e.transience(), Transience::Permanent);
}

#[tokio::test]
async fn a_429_carries_retry_after() {
    let e = failing(Reply::body(429, "slow down").header("Retry-After", "17")).await;
    assert_eq!(
        e,
        LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(17))
        }
    );
    assert_eq!(e.transience(), Transience::Transient);

    let e = failing(
        Reply::body(429, "slow down").header("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),
    )
    .await;
    assert_eq!(
        e,
        LlmError::RateLimited {
            retry_after: Some(Duration::ZERO)
        }
    );
}

#[tokio::test]
async fn a_500_and_a_503_are_transient_provider_errors() {
    for status in [500, 503] {
        let e = failing(Reply::body(status, "upstream overloaded")).await;
        assert_eq!(
            e,
            LlmError::ProviderError {
                provider: "openai".into(),
                status,
                message: "upstream overloaded".into()
            }
        );
        assert_eq!(e.transience(), Transience::Transient);
    }
}

#[tokio::test]
async fn secrets_in_error_bodies_never_survive() {
    for (body, secret) in secret_bodies() {
        assert!(body.chars().count() > 512);
        for status in [400, 401, 500] {
            let e = failing(Reply::body(status, body.clone())).await;
            let message = match &e {
                LlmError::ProviderError { message, .. }
                | LlmError::AuthenticationError(message) => message.clone(),
                other => panic!("{other:?}"),
            };
            assert!(
                message.chars().count() <= 512,
                "{}",
                message.chars().count()
            );
            assert_no_fragment(&message, &secret);
            assert_no_fragment(&e.to_string(), &secret);
            assert_no_fragment(&format!("{e:?}"), &secret);
        }
    }
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let e = failing(Reply::body(200, "{\"choices\": [")).await;
    assert!(matches!(e, LlmError::ParseError(_)), "{e:?}");
    assert_eq!(e.transience(), Transience::Unknown);

    let e = failing(Reply::body(200, "<html>gateway</html>")).await;
    assert!(matches!(e, LlmError::ParseError(_)), "{e:?}");
}

#[tokio::test]
async fn malformed_sse_is_a_parse_error_after_the_good_chunks() {
    let server = TestServer::start(vec![Reply::sse(vec![
        "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n",
        "data: {not json}\n\n",
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap().content, "ok");
    assert!(matches!(items[1], Err(LlmError::ParseError(_))));
}

#[tokio::test]
async fn a_truncated_stream_is_a_parse_error() {
    let server = TestServer::start(vec![Reply::sse(vec![
        "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"tial",
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap().content, "par");
    let Err(LlmError::ParseError(m)) = &items[1] else {
        panic!("{items:?}")
    };
    assert!(m.contains("[DONE]"), "{m}");
}

#[tokio::test]
async fn a_refused_connection_is_a_transient_network_error() {
    let adapter = OpenAiCompatibleAdapter::new(refused_url().await).unwrap();
    let e = adapter.generate(&request()).await.unwrap_err();
    assert!(matches!(e, LlmError::NetworkError(_)), "{e:?}");
    assert_eq!(e.transience(), Transience::Transient);
    let Err(e) = adapter.generate_stream(&request()).await else {
        panic!("stream over a refused connection")
    };
    assert!(matches!(e, LlmError::NetworkError(_)), "{e:?}");
}

#[tokio::test]
async fn a_failing_stream_request_maps_its_status() {
    let server = TestServer::start(vec![
        Reply::body(503, "overloaded").header("retry-after", "1"),
    ])
    .await;
    let Err(e) = adapter(&server).generate_stream(&request()).await else {
        panic!("503 stream")
    };
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.transience(), Transience::Transient);
}

#[tokio::test]
async fn error_envelopes_map_by_their_typed_code() {
    // Inside a 200: the numeric code stands in for the status.
    let e = failing(Reply::json(
        200,
        &json!({"error": {"message": "upstream timeout", "code": 504}}),
    ))
    .await;
    assert_eq!(e.status(), Some(504));
    assert_eq!(e.transience(), Transience::Transient);

    // Inside a 200 with nothing typed: a failed 2xx, Unknown.
    let e = failing(Reply::json(200, &json!({"error": {"message": "hm"}}))).await;
    assert_eq!(e.status(), Some(200));
    assert_eq!(e.transience(), Transience::Unknown);

    // Codes with a dedicated variant.
    let e = failing(Reply::json(
        400,
        &json!({"error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
    ))
    .await;
    assert!(matches!(e, LlmError::ContextLengthExceeded(_)), "{e:?}");
    let e = failing(Reply::json(
        400,
        &json!({"error": {"message": "no", "code": "content_filter"}}),
    ))
    .await;
    assert!(matches!(e, LlmError::ContentFiltered(_)), "{e:?}");

    // A mid-stream error event.
    let server = TestServer::start(vec![Reply::sse(vec![
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
    ])])
    .await;
    let items = adapter(&server)
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].as_ref().unwrap_err().status(), Some(500));
}

#[test]
fn debug_output_hides_the_key() {
    let a = OpenAiCompatibleAdapter::new("http://127.0.0.1:1/v1")
        .unwrap()
        .with_api_key(KEY);
    let debug = format!("{a:?}");
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("REDACTED"));
    assert!(OpenAiCompatibleAdapter::new("not a url").is_err());
    assert!(OpenAiCompatibleAdapter::new("ftp://127.0.0.1/").is_err());
}
