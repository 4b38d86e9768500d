//! Both HTTP adapters against hostile servers on 127.0.0.1: an SSE event
//! with no end, an error body that trickles forever, a 200 that is not a
//! completion, and tool calls in tens of thousands of fragments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::llm::DEFAULT_MAX_EVENT_BYTES;
use aegis::{
    error::LlmError,
    llm::{
        AnthropicLlmAdapter, DEFAULT_ERROR_BODY_DEADLINE, LlmMessage, LlmPort, LlmRequest,
        OpenAiCompatibleLlmAdapter,
    },
};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;
use support::http_server::{Reply, TestServer};
use tokio::time::Instant;

fn request() -> LlmRequest {
    LlmRequest::new("m", vec![LlmMessage::user("hi")])
}

fn openai(server: &TestServer) -> OpenAiCompatibleLlmAdapter {
    OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url())).unwrap()
}

fn anthropic(server: &TestServer) -> AnthropicLlmAdapter {
    AnthropicLlmAdapter::new(format!("{}/v1", server.url())).unwrap()
}

/// Every item of a stream, up to and including its first error.
async fn drain(port: &dyn LlmPort) -> Result<usize, LlmError> {
    let mut stream = port.generate_stream(&request()).await?;
    let mut n = 0;
    while let Some(item) = stream.next().await {
        item?;
        n += 1;
    }
    Ok(n)
}

#[tokio::test]
async fn an_event_over_the_bound_is_a_parse_error_for_both_adapters() {
    assert_eq!(DEFAULT_MAX_EVENT_BYTES, 16 * 1024 * 1024);
    // Short lines, none over the bound, that never end their event.
    let endless_event = "data: 0123456789012345678901234567890123456789\n".repeat(100);
    let server = TestServer::start(vec![
        Reply::sse(vec![&endless_event]),
        Reply::sse(vec![&endless_event]),
    ])
    .await;
    let ports: [Box<dyn LlmPort>; 2] = [
        Box::new(openai(&server).with_max_event_bytes(1024)),
        Box::new(anthropic(&server).with_max_event_bytes(1024)),
    ];
    for port in ports {
        let e = drain(port.as_ref()).await.unwrap_err();
        assert!(
            matches!(&e, LlmError::ParseError(m) if m.contains("event longer than 1024 bytes")),
            "{}: {e:?}",
            port.get_provider_name()
        );
    }
}

#[tokio::test]
async fn a_response_body_over_the_bound_is_a_parse_error_for_both_adapters() {
    let big = Reply::body(200, format!("{{\"content\": \"{}\"}}", "x".repeat(4096)));
    let server = TestServer::start(vec![big.clone(), big]).await;
    let ports: [Box<dyn LlmPort>; 2] = [
        Box::new(openai(&server).with_max_event_bytes(1024)),
        Box::new(anthropic(&server).with_max_event_bytes(1024)),
    ];
    for port in ports {
        let e = port.generate(&request()).await.unwrap_err();
        assert!(
            matches!(&e, LlmError::ParseError(m) if m.contains("body longer than 1024 bytes")),
            "{}: {e:?}",
            port.get_provider_name()
        );
    }
}

#[tokio::test]
async fn an_event_within_the_bound_still_streams() {
    let text = "x".repeat(900);
    let openai_event = format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"delta": {"content": text}, "finish_reason": "stop"}]})
    );
    let server = TestServer::start(vec![Reply::sse(vec![&openai_event])]).await;
    let port = openai(&server).with_max_event_bytes(1024);
    assert_eq!(drain(&port).await.unwrap(), 1);
}

/// A 500 whose body arrives one piece every 100 ms, for 1,000 s.
fn trickling_error() -> Reply {
    let parts = (0..10_000)
        .map(|i| format!("err{i:04} ").into_bytes())
        .collect();
    Reply::trickle(500, parts, Duration::from_millis(100))
}

#[tokio::test(start_paused = true)]
async fn a_trickling_error_body_ends_at_its_deadline_with_the_excerpt_so_far() {
    assert_eq!(DEFAULT_ERROR_BODY_DEADLINE, Duration::from_secs(5));
    let server = TestServer::start(vec![trickling_error(), trickling_error()]).await;
    let cases: [(Box<dyn LlmPort>, Duration); 2] = [
        // The default deadline.
        (Box::new(openai(&server)), DEFAULT_ERROR_BODY_DEADLINE),
        // A configured one.
        (
            Box::new(anthropic(&server).with_error_body_deadline(Duration::from_secs(2))),
            Duration::from_secs(2),
        ),
    ];
    for (port, deadline) in cases {
        let started = Instant::now();
        let e = port.generate(&request()).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= deadline && took < deadline + Duration::from_millis(100),
            "{}: took {took:?}",
            port.get_provider_name()
        );
        match e {
            LlmError::ProviderError {
                status: 500,
                message,
                ..
            } => {
                // The pieces written before the deadline, and none after.
                assert!(message.starts_with("err0000 err0001 "), "{message}");
                let pieces = message.split_whitespace().count() as u128;
                let want = deadline.as_millis() / 100;
                assert!(
                    pieces + 1 >= want && pieces <= want + 1,
                    "{pieces} pieces: {message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_body_deadline_too_long_for_an_instant_is_no_deadline() {
    // The body ends (after 10 pieces); with no deadline all of it is read.
    let parts = (0..10).map(|i| format!("p{i} ").into_bytes()).collect();
    let server = TestServer::start(vec![Reply::trickle(503, parts, Duration::from_secs(60))]).await;
    let port = openai(&server).with_error_body_deadline(Duration::MAX);
    match port.generate(&request()).await.unwrap_err() {
        LlmError::ProviderError { message, .. } => {
            assert_eq!(message.trim_end(), "p0 p1 p2 p3 p4 p5 p6 p7 p8 p9")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_200_that_is_not_a_completion_is_a_parse_error_for_both_adapters() {
    let bodies = [
        json!({}),
        json!({"status": "queued"}),
        json!({"id": "x", "model": "m"}),
    ];
    for body in bodies {
        let server =
            TestServer::start(vec![Reply::json(200, &body), Reply::json(200, &body)]).await;
        let ports: [Box<dyn LlmPort>; 2] =
            [Box::new(openai(&server)), Box::new(anthropic(&server))];
        for port in ports {
            let e = port.generate(&request()).await.unwrap_err();
            assert!(
                matches!(e, LlmError::ParseError(_)),
                "{} {body}: {e:?}",
                port.get_provider_name()
            );
        }
    }
    // The real shapes still decode, an empty answer included.
    let server = TestServer::start(vec![Reply::json(
        200,
        &json!({"type": "message", "role": "assistant", "model": "c", "content": []}),
    )])
    .await;
    assert_eq!(
        anthropic(&server)
            .generate(&request())
            .await
            .unwrap()
            .content,
        ""
    );
}

const CALLS: usize = 2_000;

/// Every call opens, then each receives its arguments: 2 fragments per call,
/// interleaved, some addressed only by id.
fn openai_fragments() -> String {
    let mut body = String::new();
    for i in 0..CALLS {
        let open = json!({"choices": [{"delta": {"tool_calls": [
            {"index": i, "id": format!("c{i}"), "function": {"name": format!("f{i}"), "arguments": "{\"a\":"}}
        ]}}]});
        body.push_str(&format!("data: {open}\n\n"));
    }
    for i in (0..CALLS).rev() {
        // Odd calls by id only.
        let fragment = if i % 2 == 1 {
            json!({"id": format!("c{i}"), "function": {"arguments": format!("{i}}}")}})
        } else {
            json!({"index": i, "function": {"arguments": format!("{i}}}")}})
        };
        let event = json!({"choices": [{"delta": {"tool_calls": [fragment]}}]});
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.push_str(
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    );
    body
}

fn anthropic_fragments() -> String {
    let mut body = String::new();
    let event = |kind: &str, data: serde_json::Value| format!("event: {kind}\ndata: {data}\n\n");
    for i in 0..CALLS {
        body.push_str(&event("content_block_start", json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "tool_use", "id": format!("t{i}"), "name": format!("f{i}"), "input": {}}})));
    }
    for part in ["{\"a\":", "PART"] {
        for i in (0..CALLS).rev() {
            let partial = if part == "PART" {
                format!("{i}}}")
            } else {
                part.to_string()
            };
            body.push_str(&event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": partial}}),
            ));
        }
    }
    for i in 0..CALLS {
        body.push_str(&event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    body.push_str(&event("message_stop", json!({"type": "message_stop"})));
    body
}

#[tokio::test]
async fn thousands_of_interleaved_fragments_assemble_into_their_calls() {
    let (o, a) = (openai_fragments(), anthropic_fragments());
    let server = TestServer::start(vec![Reply::sse(vec![&o]), Reply::sse(vec![&a])]).await;
    let ports: [(Box<dyn LlmPort>, &str); 2] = [
        (Box::new(openai(&server)), "c"),
        (Box::new(anthropic(&server)), "t"),
    ];
    for (port, id) in ports {
        let mut stream = port.generate_stream(&request()).await.unwrap();
        let mut calls = Vec::new();
        while let Some(chunk) = stream.next().await {
            calls.extend(chunk.unwrap().tool_calls);
        }
        assert_eq!(calls.len(), CALLS, "{}", port.get_provider_name());
        for (i, call) in calls.iter().enumerate() {
            assert_eq!(call.id, format!("{id}{i}"));
            assert_eq!(call.name, format!("f{i}"));
            assert_eq!(call.arguments, json!({"a": i}));
        }
    }
}
