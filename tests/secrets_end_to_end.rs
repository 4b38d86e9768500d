//! Echoed secrets followed everywhere: a provider on 127.0.0.1 that echoes
//! the configured key (a bare 32-hex key, a vLLM `--api-key`, no `sk-`
//! prefix to give it away) and a registered proxy token on every error path
//! of both adapters — 401, 403, 404, 429, 500, 529, a 200 whose body is not
//! a completion, a stream error event — driven through a Paladin node, a
//! fallback chain and the SQLite waypoint store. No fragment of a secret may
//! appear in the waypoints (decoded or the file's bytes), the outcome, the
//! state, the trace events, the captured `tracing` output or any `Debug`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::logs::Logs;
use support::stores;

use aegis::{
    engine::WarEngine,
    graph::{EngineLimits, InputMapping, NodeSpec, WarGraph},
    id::{END, START},
    llm::{AnthropicLlmAdapter, FallbackLlmAdapter, LlmPort, OpenAiCompatibleLlmAdapter},
    paladin::Paladin,
    paladin::PaladinExecutionService,
    state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec},
    trace::CollectingTraceSink,
    waypoint::{SqliteWaypointStore, WaypointStore},
};
use serde_json::json;
use std::sync::Arc;
use support::http_server::{Reply, TestServer};

/// The OpenAI-compatible server's key: 32 hex digits, no recognisable shape.
const OPENAI_KEY: &str = "3f9a0c6e1b7d4f2a8c5e9b1d7a3f6c0e";
/// The Anthropic key: a vLLM-style `--api-key` word.
const ANTHROPIC_KEY: &str = "vllmlocalKEYzq81xw";
/// A proxy token the user registers with `with_secret` on the OpenAI adapter.
const PROXY_TOKEN: &str = "PrxTkn77yy41QQ";
/// A secret registered only on the chain (it appears early in every body,
/// so no adapter's bound cuts it).
const CHAIN_SECRET: &str = "chainOnlySecret5521";

const SECRETS: [&str; 4] = [OPENAI_KEY, ANTHROPIC_KEY, PROXY_TOKEN, CHAIN_SECRET];

/// No window of `WINDOW` characters of any secret in `text`.
fn assert_clean(what: &str, text: &str) {
    const WINDOW: usize = 8;
    for secret in SECRETS {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(WINDOW) {
            let fragment: String = w.iter().collect();
            assert!(
                !text.contains(&fragment),
                "{what}: fragment `{fragment}` of a secret survived in:\n{text}"
            );
        }
    }
}

/// Which adapter answers a request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dialect {
    OpenAi,
    Anthropic,
}

/// Every way a provider can fail while echoing what it was sent.
#[derive(Clone, Copy, Debug)]
enum Path {
    Status(u16),
    NotACompletion,
    StreamErrorEvent,
}

/// An error body naming every secret: the key as the server received it,
/// the proxy token, the chain's secret first so no bound cuts it.
fn echo_body(dialect: Dialect) -> String {
    let message = format!(
        "{CHAIN_SECRET} rejected key {{ECHO_KEY}} (proxy {PROXY_TOKEN}); {}",
        "detail ".repeat(60)
    );
    match dialect {
        Dialect::OpenAi => json!({"error": {
            "message": message, "type": "invalid_request_error", "code": "{ECHO_KEY}"
        }}),
        Dialect::Anthropic => json!({"type": "error", "error": {
            "type": "invalid_request_error", "message": message
        }}),
    }
    .to_string()
}

fn reply(dialect: Dialect, path: Path, streaming: bool) -> Reply {
    let quoted = format!("{CHAIN_SECRET} {{ECHO_KEY}} {PROXY_TOKEN}");
    match (path, dialect, streaming) {
        (Path::Status(s), _, _) => Reply::body(s, echo_body(dialect)).header("retry-after", "0"),
        // serde quotes the offending string value in its message.
        (Path::NotACompletion, Dialect::OpenAi, false) => {
            Reply::json(200, &json!({"choices": quoted}))
        }
        (Path::NotACompletion, Dialect::Anthropic, false) => {
            Reply::json(200, &json!({"content": quoted}))
        }
        (Path::NotACompletion, Dialect::OpenAi, true) => {
            Reply::sse(vec![&format!("data: {}\n\n", json!({"choices": quoted}))])
        }
        (Path::NotACompletion, Dialect::Anthropic, true) => Reply::sse(vec![&format!(
            "event: content_block_delta\ndata: {}\n\n",
            json!({"type": "content_block_delta", "index": quoted})
        )]),
        (Path::StreamErrorEvent, Dialect::OpenAi, _) => Reply::sse(vec![&format!(
            "data: {}\n\n",
            json!({"error": {"message": quoted, "type": "server_error"}})
        )]),
        (Path::StreamErrorEvent, Dialect::Anthropic, _) => Reply::sse(vec![&format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": quoted}})
        )]),
    }
}

fn graph() -> WarGraph {
    let question = FieldName::new("question").unwrap();
    let answer = FieldName::new("answer").unwrap();
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(question, DispatchRule::LastWrite, None, true),
        FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("Answer: {question}"),
            answer,
        ),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    g
}

async fn run_one(order: [Dialect; 2], path: Path, streaming: bool) {
    let logs = Logs::global();
    // Each element answers once; a second pass (a retry) gets the same.
    let replies = (0..4)
        .flat_map(|_| order.map(|d| reply(d, path, streaming)))
        .collect();
    let server = TestServer::start(replies).await;
    let openai = OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_api_key(OPENAI_KEY)
        .with_secret(PROXY_TOKEN);
    let anthropic = AnthropicLlmAdapter::new(format!("{}/v1", server.url()))
        .unwrap()
        .with_api_key(ANTHROPIC_KEY);
    assert_clean("adapter Debug", &format!("{openai:?} {anthropic:?}"));
    let openai: Arc<dyn LlmPort> = Arc::new(openai);
    let anthropic: Arc<dyn LlmPort> = Arc::new(anthropic);
    let sink = CollectingTraceSink::new();
    let ports = order.map(|d| match d {
        Dialect::OpenAi => openai.clone(),
        Dialect::Anthropic => anthropic.clone(),
    });
    let chain = FallbackLlmAdapter::new(ports.to_vec())
        .unwrap()
        .with_secret(CHAIN_SECRET)
        .with_trace_sink(sink.clone());
    assert_clean("chain Debug", &format!("{chain:?}"));
    let service = PaladinExecutionService::new(chain).with_streaming(streaming);

    let dir = stores::TempDir::new("secrets");
    let store = Arc::new(SqliteWaypointStore::open(dir.db()).await.unwrap());
    let thread = format!("{order:?}-{path:?}-{streaming}");
    let outcome = WarEngine::new(store.clone())
        .with_paladin_port(service)
        .with_trace_sink(sink.clone())
        .start(&graph(), &thread, json!({"question": "q"}))
        .await
        .unwrap();
    let what = format!("{thread}: ");
    assert!(
        outcome.node_error().is_some(),
        "{what} the provider never answered, yet: {outcome:?}"
    );
    assert!(!server.requests().is_empty(), "{what}");

    assert_clean(&format!("{what}outcome"), &format!("{outcome:?}"));
    assert_clean(
        &format!("{what}state"),
        &serde_json::to_string(outcome.state()).unwrap(),
    );
    let error = outcome.node_error().unwrap();
    assert_clean(&format!("{what}node error"), &format!("{error} {error:?}"));
    assert_clean(&format!("{what}trace"), &format!("{:?}", sink.events()));
    let history = store.history(&thread).await.unwrap();
    assert!(!history.is_empty());
    assert_clean(
        &format!("{what}waypoints"),
        &serde_json::to_string(&history).unwrap(),
    );
    drop(store);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        // The WAL and its index may go as the last connection closes.
        let Ok(bytes) = std::fs::read(entry.unwrap().path()) else {
            continue;
        };
        assert_clean(
            &format!("{what}SQLite file"),
            &String::from_utf8_lossy(&bytes),
        );
    }
    assert_clean(&format!("{what}logs"), &logs.text());
}

#[tokio::test]
async fn no_echoed_secret_reaches_any_record_on_any_error_path() {
    let paths = [
        Path::Status(401),
        Path::Status(403),
        Path::Status(404),
        Path::Status(429),
        Path::Status(500),
        Path::Status(529),
        Path::NotACompletion,
        Path::StreamErrorEvent,
    ];
    for streaming in [true, false] {
        for order in [
            [Dialect::OpenAi, Dialect::Anthropic],
            [Dialect::Anthropic, Dialect::OpenAi],
        ] {
            for path in paths {
                if matches!(path, Path::StreamErrorEvent) && !streaming {
                    continue;
                }
                run_one(order, path, streaming).await;
            }
        }
    }
    // The run did log: the chain's hops and the node failures are there.
    assert!(Logs::global().text().contains("model fallback hop"));
}

/// Without value-based removal a bare key in an error body survives the
/// pattern redaction: this is what the test above would catch.
#[test]
fn pattern_redaction_alone_would_leak_a_bare_key() {
    let body = format!("rejected key {OPENAI_KEY}");
    assert!(aegis_runtime::__internal::redact_secrets(&body).contains(OPENAI_KEY));
    let scrubbed = aegis::error::KnownSecrets::new()
        .with(OPENAI_KEY)
        .redact_excerpt(&body);
    assert!(!scrubbed.contains(OPENAI_KEY));
}
