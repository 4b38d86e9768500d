//! A Paladin node streaming its answer from a real model server on your
//! machine: llama.cpp, vLLM, Ollama, or anything else that speaks the
//! OpenAI chat-completions API.
//!
//! ```text
//! cargo run --example local_llm -- http://127.0.0.1:8080/v1 [MODEL]
//! ```
//!
//! The base URL is the API root, version segment included (Ollama:
//! `http://localhost:11434/v1`, vLLM: `http://localhost:8000/v1`, llama.cpp:
//! `http://localhost:8080/v1`); MODEL is the model to ask for (default
//! `aegis-tiny`, the model `scripts/local-llm.sh` serves).
//!
//! Without a base URL the example starts the test suite's own server with
//! `scripts/local-llm.sh` when that is installed (llama.cpp with a tiny
//! random-weight model: expect word salad), and otherwise says how to give
//! it one, and exits.

use aegis::engine::StreamMode;
use aegis::engine::StreamOptions;
use aegis::graph::InputMapping;
use aegis::llm::OpenAiCompatibleLlmAdapter;
use aegis::paladin::Paladin;
use aegis::prelude::*;
use futures::StreamExt;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (base_url, _server) = match args.next() {
        Some(url) => (url, None),
        None => match ScriptServer::start()? {
            Some(server) => (server.base_url.clone(), Some(server)),
            None => {
                println!(
                    "usage: cargo run --example local_llm -- <base-url> [model]\n\
                     e.g. http://localhost:11434/v1 (Ollama), http://localhost:8000/v1 (vLLM),\n\
                     http://localhost:8080/v1 (llama.cpp); or install the test suite's server\n\
                     with `scripts/local-llm.sh install` and run this again with no arguments."
                );
                return Ok(());
            }
        },
    };
    let model = args.next().unwrap_or_else(|| "aegis-tiny".to_string());

    let llm = OpenAiCompatibleLlmAdapter::new(&base_url)?.with_provider_name("local");
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm);
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
                Paladin::new("Explainer")
                    .with_model(model)
                    .with_max_tokens(48),
                InputMapping::new("{question}"),
                FieldName::new("answer")?,
            ),
        )
        .add_edge(START, "explain")
        .add_edge("explain", END)
        .set_aegis(
            "explain",
            Aegis::new()
                .with_retry(RetryPolicy::default().with_max_attempts(2))
                .with_timeout(
                    TimeoutPolicy::idle(Duration::from_secs(10))
                        .with_first_chunk(Duration::from_secs(30)),
                ),
        );

    println!("asking {base_url}");
    let input = json!({"question": "In one sentence: why do workflows need retries?"});
    let mut stream = engine.stream_with(
        &graph,
        "local-llm",
        input,
        StreamOptions::new([StreamMode::Tokens]),
    );
    let mut out = std::io::stdout();
    let outcome = loop {
        let Some(event) = stream.next().await else {
            return Err("the stream ended without an outcome".into());
        };
        match event {
            StreamEvent::Token { text, .. } => {
                write!(out, "{text}")?;
                out.flush()?;
            }
            StreamEvent::AttemptAbandoned { attempt, .. } => {
                writeln!(out, "\n[attempt {attempt} abandoned; retrying]")?;
            }
            StreamEvent::Finished(outcome) => break outcome?,
            _ => {}
        }
    };
    writeln!(out)?;
    let state = outcome.into_result()?;
    let answer = state
        .get("answer")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    println!("merged answer: {answer:?}");
    Ok(())
}

/// The test suite's server, started by `scripts/local-llm.sh` and stopped
/// when dropped.
struct ScriptServer {
    name: String,
    base_url: String,
}

impl ScriptServer {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/local-llm.sh")
    }

    /// Starts an instance if the script has installed the server; `None`
    /// when it has not (installing takes minutes: not an example's call).
    fn start() -> Result<Option<Self>, BoxError> {
        let installed = Command::new("bash")
            .arg(Self::script())
            .arg("installed")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !installed {
            return Ok(None);
        }
        let name = format!("example-{}", std::process::id());
        let out = Command::new("bash")
            .arg(Self::script())
            .args(["start", &name])
            .env("AEGIS_LOCAL_LLM_PARENT_PID", std::process::id().to_string())
            .stderr(Stdio::inherit())
            .output()?;
        if !out.status.success() {
            return Err("scripts/local-llm.sh could not start the server".into());
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let base_url = stdout.lines().last().unwrap_or_default().trim().to_string();
        Ok(Some(ScriptServer { name, base_url }))
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(Self::script())
            .args(["stop", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}
