//! Streaming a Paladin's answer token by token, retry-aware.
//!
//! The example starts a small OpenAI-compatible server on 127.0.0.1 that
//! streams its answers as server-sent events. Its first answer breaks off
//! mid-sentence with an error (a 503 inside the stream); the node's retry
//! policy runs a second attempt, which the server answers in full. The
//! program prints every token as it arrives, says when an attempt is
//! abandoned (a UI would erase its tokens), and prints the retry's answer in
//! its place; at the end it checks that what it showed is exactly what the
//! run merged.
//!
//! ```text
//! cargo run --example stream_tokens
//! ```

use aegis::engine::StreamMode;
use aegis::engine::StreamOptions;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::OpenAiCompatibleLlmAdapter;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::prelude::*;
use aegis::trace::TraceEvent;
use futures::StreamExt;
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the server streams, one SSE event per token, `PAUSE` apart.
const BROKEN: &[&str] = &["Rust ", "guarantees ", "memory ", "saf"];
const WHOLE: &[&str] = &[
    "Rust ",
    "guarantees ",
    "memory ",
    "safety ",
    "without ",
    "a ",
    "garbage ",
    "collector.",
];
const PAUSE: Duration = Duration::from_millis(40);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}/v1", listener.local_addr()?);
    let server = tokio::spawn(serve(listener));

    let llm = OpenAiCompatibleLlmAdapter::new(&base_url)?.with_provider_name("local");
    let port = Arc::new(PaladinExecutionService::new(llm));
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);

    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(
            FieldName::new("question")?,
            DispatchRule::LastWrite,
            None,
            true,
        ),
        FieldSpec::new(
            FieldName::new("answer")?,
            DispatchRule::LastWrite,
            None,
            false,
        ),
    ]);
    let mut graph = WarGraph::new(schema, EngineLimits::default());
    graph
        .add_node(
            "explain",
            NodeSpec::paladin(
                Paladin::new("Explainer").with_model("local-model"),
                InputMapping::new("{question}"),
                FieldName::new("answer")?,
            ),
        )
        .add_edge(START, "explain")
        .add_edge("explain", END)
        .set_aegis(
            "explain",
            Aegis::new().with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_interval(Duration::from_millis(200))
                    .with_jitter(false),
            ),
        );

    let input = json!({"question": "What does Rust guarantee?"});
    let options = StreamOptions::new([StreamMode::Tokens, StreamMode::Events]);
    let mut stream = engine.stream_with(&graph, "stream-demo", input, options);

    // What a UI would show: the current attempt's tokens.
    let mut shown = String::new();
    let mut out = std::io::stdout();
    let outcome = loop {
        let Some(event) = stream.next().await else {
            return Err("the stream ended without an outcome".into());
        };
        match event {
            StreamEvent::Token { text, .. } => {
                shown.push_str(&text);
                write!(out, "{text}")?;
                out.flush()?;
            }
            StreamEvent::AttemptAbandoned {
                attempt, reason, ..
            } => {
                writeln!(out, "\n  [attempt {attempt} abandoned: {reason}]")?;
                writeln!(out, "  [erasing {:?}]", shown)?;
                shown.clear();
            }
            StreamEvent::Trace(TraceEvent::NodeStarted { attempt, .. }) => {
                write!(out, "attempt {attempt}: ")?;
                out.flush()?;
            }
            StreamEvent::Trace(TraceEvent::RetryScheduled { attempt, delay, .. }) => {
                writeln!(out, "  [attempt {attempt} in {delay:?}]")?;
            }
            StreamEvent::Finished(outcome) => break outcome?,
            _ => {}
        }
    };
    writeln!(out)?;
    server.abort();

    let merged = outcome.state().get("answer").and_then(|v| v.as_str());
    println!("merged answer: {merged:?}");
    if merged != Some(shown.as_str()) {
        return Err(format!("the stream showed {shown:?}, the run merged {merged:?}").into());
    }
    println!("the tokens shown are exactly the merged answer");
    Ok(())
}

/// Answers the first request with a stream that breaks off with an error,
/// every later one with the whole answer.
async fn serve(listener: TcpListener) {
    let mut served = 0;
    while let Ok((socket, _)) = listener.accept().await {
        served += 1;
        let broken = served == 1;
        tokio::spawn(async move {
            if let Err(e) = answer(socket, broken).await {
                eprintln!("server: {e}");
            }
        });
    }
}

async fn answer(mut socket: TcpStream, broken: bool) -> Result<(), BoxError> {
    read_request(&mut socket).await?;
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    socket.write_all(head.as_bytes()).await?;
    let tokens = if broken { BROKEN } else { WHOLE };
    for token in tokens {
        tokio::time::sleep(PAUSE).await;
        let event = json!({"choices": [{"index": 0, "delta": {"content": token}}]});
        socket
            .write_all(format!("data: {event}\n\n").as_bytes())
            .await?;
        socket.flush().await?;
    }
    tokio::time::sleep(PAUSE).await;
    let end = if broken {
        let error = json!({"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}});
        format!("data: {error}\n\n")
    } else {
        let stop = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        format!("data: {stop}\n\ndata: [DONE]\n\n")
    };
    socket.write_all(end.as_bytes()).await?;
    socket.shutdown().await?;
    Ok(())
}

/// Reads one request: its head, then as many body bytes as it announced.
async fn read_request(socket: &mut TcpStream) -> Result<(), BoxError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err("the client closed the connection mid-request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return Ok(());
        }
    }
}
