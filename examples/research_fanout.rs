//! An LLM worker in a fan-out, as a newcomer would write it: a planner
//! musters 20 questions to a Paladin worker template, each task's prompt
//! reads its own question (`{task.question}`), answers are cached per task,
//! and a summarizer joins them.
//!
//! The worker's model chain is a `FallbackLlmAdapter`: first an
//! OpenAI-compatible server this example starts on 127.0.0.1 (it streams
//! Server-Sent Events, the adapter's default, and answers some questions
//! with 503, so those hop), then a `MockLlmAdapter` backup. The graph runs
//! twice, on two threads; the second is served from the in-memory node
//! cache and sends no prompt at all (the backup's answers are cached too,
//! with `fallback_results = true`).
//!
//! It prints `prompt[<task key>]: <the prompt sent>` and
//! `served_by[<task key>]: <provider>` for every task, then the summary:
//!
//! ```text
//! cargo run --example research_fanout
//! ```

use aegis::error::PaladinError;
use aegis::graph::HeartbeatHandle;
use aegis::llm::{FallbackLlmAdapter, MockLlmAdapter, OpenAiCompatibleLlmAdapter};
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::paladin::PaladinPort;
use aegis::paladin::PaladinResult;
use aegis::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const QUESTIONS: u64 = 20;

/// Musters one task per question; the task key is `q00`..`q19`.
#[aegis]
async fn planner(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    let tasks = (0..QUESTIONS).map(|i| {
        (
            format!("q{i:02}"),
            json!({ "question": format!("What is {i} squared?") }),
        )
    });
    Ok(Directive::muster(StateDelta::new(), "answer", tasks))
}

/// Joins the answers (merged in task order) into one line.
#[aegis]
async fn summarizer(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let answers = state
        .get("answers")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let first = state
        .get("answers")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("-");
    let mut delta = StateDelta::new();
    delta.set(
        "summary",
        format!("{answers} answers, the first: \"{first}\""),
    )?;
    Ok(delta)
}

fn researcher() -> Paladin {
    Paladin::new("Researcher")
        .with_model("local-model")
        .with_system_prompt("Answer in one short sentence.")
}

/// What each task's Paladin call sent and who answered, by task key.
type Seen = Arc<Mutex<BTreeMap<String, (String, String)>>>;

/// Records every prompt sent and the provider that served it. The task key
/// is the `[..]` the prompt starts with (the worker's template puts it
/// there).
struct Recording {
    inner: PaladinExecutionService,
    seen: Seen,
}

#[async_trait]
impl PaladinPort for Recording {
    async fn execute(&self, paladin: &Paladin, input: &str) -> Result<PaladinResult, PaladinError> {
        self.execute_observed(paladin, input, &HeartbeatHandle::noop())
            .await
    }

    async fn execute_observed(
        &self,
        paladin: &Paladin,
        input: &str,
        heartbeat: &HeartbeatHandle,
    ) -> Result<PaladinResult, PaladinError> {
        let result = self
            .inner
            .execute_observed(paladin, input, heartbeat)
            .await?;
        let key = task_key(input).unwrap_or("?").to_string();
        let served_by = result.served_by.clone().unwrap_or_else(|| "?".into());
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(key, (input.to_string(), served_by));
        }
        Ok(result)
    }
}

/// `q07` from `[q07] What is 7 squared?`.
fn task_key(prompt: &str) -> Option<&str> {
    prompt.strip_prefix('[')?.split_once(']').map(|(k, _)| k)
}

/// A small OpenAI-compatible server: `POST /v1/chat/completions`, one
/// request per connection. Questions whose key ends in 3 or 8 get a 503
/// (transient, so the chain hops to the backup); the others a streamed
/// answer.
async fn serve_local_model() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Err(e) = answer(socket).await {
                    eprintln!("local model: {e}");
                }
            });
        }
    });
    Ok(url)
}

async fn answer(mut socket: TcpStream) -> std::io::Result<()> {
    let body = read_body(&mut socket).await?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let prompt = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let n: u64 = task_key(prompt)
        .and_then(|k| k.trim_start_matches('q').parse().ok())
        .unwrap_or(0);
    let reply = if n % 5 == 3 {
        let body = json!({"error": {"message": "overloaded", "type": "server_error"}});
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.to_string().len()
        )
    } else {
        let text =
            json!({"choices": [{"delta": {"content": format!("{n} squared is {}.", n * n)}}]});
        let stop = json!({"choices": [{"delta": {}, "finish_reason": "stop"}]});
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: {text}\n\ndata: {stop}\n\ndata: [DONE]\n\n"
        )
    };
    socket.write_all(reply.as_bytes()).await?;
    socket.shutdown().await
}

/// Reads one HTTP/1.1 request and returns its body (by Content-Length).
async fn read_body(socket: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            let n = socket.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Ok(buf.split_off(end + 4));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = graph! {
        schema {
            answers: Append = [],
            summary: LastWrite,
        }
        nodes {
            planner,
            // Answers the backup served are cached too (by default only
            // the primary's are: the key names the primary's model).
            #[aegis(retry(max = 2, initial = "10ms"), cache(ttl = "1h", fallback_results = true))]
            worker answer = paladin(researcher(), "[{task.key}] {task.question}" -> answers),
            summarizer,
        }
        edges {
            START -> planner;
            answer -> summarizer -> END;
        }
        musters { planner -> answer }
    };
    println!("{}", graph.to_mermaid());

    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(
            OpenAiCompatibleLlmAdapter::new(serve_local_model().await?)?
                .with_provider_name("local-openai"),
        ),
        Arc::new(
            MockLlmAdapter::new()
                .with_provider_name("mock-backup")
                .with_default_response("The backup model says: ask again later."),
        ),
    ])?;
    let seen: Seen = Arc::default();
    let port = Recording {
        inner: PaladinExecutionService::new(chain),
        seen: seen.clone(),
    };
    let engine = WarEngine::new(InMemoryWaypointStore::new())
        .with_paladin_port(port)
        .with_node_cache(InMemoryNodeCache::new());

    println!("first run:");
    let first = engine
        .start(&graph, "research-1", json!({}))
        .await?
        .into_result()?;
    let sent = seen.lock().map(|s| s.clone()).unwrap_or_default();
    for (key, (prompt, served_by)) in &sent {
        println!("prompt[{key}]: {prompt}");
        println!("served_by[{key}]: {served_by}");
    }
    println!("summary: {}", first.get("summary").unwrap_or(&Value::Null));

    println!("\nsecond run:");
    if let Ok(mut s) = seen.lock() {
        s.clear();
    }
    let second = engine
        .start(&graph, "research-2", json!({}))
        .await?
        .into_result()?;
    let cached: Vec<String> = engine
        .store()
        .history("research-2")
        .await?
        .into_iter()
        .flat_map(|w| w.records)
        .filter(|r| r.node_id.as_str() == "answer" && r.cache_hit)
        .filter_map(|r| r.task_key)
        .collect();
    for key in &cached {
        println!("served_by[{key}]: cache");
    }
    let resent = seen.lock().map(|s| s.len()).unwrap_or_default();
    println!("prompts sent: {resent}");
    println!("summary: {}", second.get("summary").unwrap_or(&Value::Null));
    if sent.len() != QUESTIONS as usize || cached.len() != QUESTIONS as usize || resent != 0 {
        return Err(format!(
            "expected {QUESTIONS} prompts then {QUESTIONS} cache hits, got {} and {} ({resent} re-sent)",
            sent.len(),
            cached.len()
        )
        .into());
    }
    Ok(())
}
