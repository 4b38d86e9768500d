//! End to end against a real, independent OpenAI-compatible server: llama.cpp
//! (the server of `llama-cpp-python`, built from its source distribution)
//! with a tiny random-weight Llama model, on 127.0.0.1.
//!
//! `scripts/local-llm.sh` installs it once into a cache outside the clone
//! and starts one instance per test (`start NAME`, its base URL printed
//! last). A machine without the cache builds it on the first test: minutes,
//! bounded by [`INSTALL_LIMIT`]. A failed install fails every test here
//! loudly, with the script's output, rather than skipping: CI installs the
//! server first (`.ci/run`), and these tests are how the adapters meet a
//! server we did not write.
//!
//! The model's weights are random, so its text is word salad: the tests
//! check the protocol (tokens, limits, stop sequences, deadlines,
//! disconnects, usage, errors), never the meaning. Sampling is greedy
//! (temperature 0), so one prompt gives one answer.
//!
//! Real server, real time: every test is bounded by [`TEST_LIMIT`], uses few
//! tokens, and the server runs one thread on a 2048-token context. Our own
//! timing logic is tested on tokio's paused clock elsewhere
//! (`tests/stream_deadlines.rs`, `tests/llm_fallback.rs`).
//!
//! Tool calls: the server runs the `chatml-function-calling` chat format,
//! which constrains the model's output with a grammar built from the tools'
//! JSON Schemas, so even random weights produce a well-formed call; see
//! `tool_calls_round_trip_through_a_paladin`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::engine::StreamMode;
use aegis::engine::StreamOptions;
use aegis::error::LlmError;
use aegis::error::PaladinError;
use aegis::error::Transience;
use aegis::graph::InputMapping;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::FinishReason;
use aegis::llm::LlmChunk;
use aegis::llm::LlmMessage;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::LlmStream;
use aegis::llm::OpenAiCompatibleLlmAdapter;
use aegis::llm::StreamDeadlines;
use aegis::llm::ToolDefinition;
use aegis::paladin::Armament;
use aegis::paladin::Paladin;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::trace::TraceSink;
use futures::StreamExt;
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fixtures::{field_name, schema};

/// How long installing the server may take (a cold build on two busy cores).
const INSTALL_LIMIT: Duration = Duration::from_secs(40 * 60);
/// How long starting one instance may take.
const START_LIMIT: Duration = Duration::from_secs(90);
/// How long one test may take, server start included.
const TEST_LIMIT: Duration = Duration::from_secs(90);
/// The model name the script serves.
const MODEL: &str = "aegis-tiny";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-llm.sh")
}

/// Runs the script with `args` for at most `limit`; its stdout, or why it
/// failed (its stderr's tail included).
fn run_script(args: &[&str], limit: Duration) -> Result<String, String> {
    let stderr_path = std::env::temp_dir().join(format!(
        "aegis-local-llm-{}-{}.stderr",
        std::process::id(),
        args.join("-")
    ));
    let stderr = std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
    let mut child = Command::new("bash")
        .arg(script())
        .args(args)
        .env("AEGIS_LOCAL_LLM_PARENT_PID", std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", script().display()))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break_out(&stderr_path, &format!("still running after {limit:?}"))?;
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    if !status.success() {
        break_out(&stderr_path, &format!("exited with {status}"))?;
    }
    let _ = std::fs::remove_file(&stderr_path);
    Ok(out)
}

fn break_out(stderr_path: &Path, why: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(stderr_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!(
        "scripts/local-llm.sh {why}; its stderr ends:\n{}",
        tail.join("\n")
    ))
}

/// Installs the server once per test binary; every test shares the result,
/// so a failed install fails them all at once instead of each retrying.
async fn installed() {
    static INSTALL: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();
    let result = INSTALL
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| run_script(&["install"], INSTALL_LIMIT).map(|_| ()))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
        })
        .await;
    if let Err(e) = result {
        panic!("the local model server could not be installed: {e}");
    }
}

/// One running server instance, stopped when dropped.
struct LocalLlm {
    name: String,
    base_url: String,
    pid: u32,
    log: PathBuf,
}

impl LocalLlm {
    async fn start(name: &str) -> LocalLlm {
        installed().await;
        let name = format!("test-{}-{name}", std::process::id());
        let args = name.clone();
        let out = tokio::task::spawn_blocking(move || run_script(&["start", &args], START_LIMIT))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("could not start a local model server: {e}"));
        let mut pid = None;
        let mut log = None;
        for line in out.lines() {
            if let Some(p) = line.strip_prefix("pid=") {
                pid = p.trim().parse().ok();
            }
            if let Some(l) = line.strip_prefix("log=") {
                log = Some(PathBuf::from(l.trim()));
            }
        }
        let base_url = out.lines().last().unwrap_or_default().trim().to_string();
        assert!(
            base_url.starts_with("http://127.0.0.1:"),
            "the script's last line is not a loopback base URL: {out}"
        );
        LocalLlm {
            name,
            base_url,
            pid: pid.expect("the script prints pid="),
            log: log.expect("the script prints log="),
        }
    }

    /// The adapter for this server, named after its instance.
    fn adapter(&self) -> OpenAiCompatibleLlmAdapter {
        OpenAiCompatibleLlmAdapter::new(&self.base_url)
            .unwrap()
            .with_provider_name(self.name.clone())
    }

    /// The server's log so far (llama.cpp's and the HTTP server's).
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `limit` for the log to contain `needle`.
    async fn wait_for_log(&self, needle: &str, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.log().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Kills the server at once (SIGKILL): no goodbye on any connection.
    fn kill(&self) {
        let status = Command::new("kill")
            .args(["-9", &self.pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "could not kill the server");
    }
}

impl Drop for LocalLlm {
    /// Stops the server; its log is kept only when the test failed.
    fn drop(&mut self) {
        let _ = run_script(&["stop", &self.name], Duration::from_secs(15));
        if std::thread::panicking() {
            eprintln!("{}: server log kept at {}", self.name, self.log.display());
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A prompt no earlier request began with: llama.cpp reuses the evaluated
/// prefix of the previous prompt, which would make prompt timing and
/// generation depend on test order.
fn fresh(text: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{n}{nanos} {text}")
}

fn request(prompt: &str, max_tokens: u32) -> LlmRequest {
    LlmRequest::new(MODEL, vec![LlmMessage::user(prompt)])
        .with_temperature(0.0)
        .with_max_tokens(max_tokens)
}

/// `words` one-letter words: one token each for this model's tokenizer
/// (its vocabulary has every letter with and without a leading space, and
/// few longer pieces, so longer words cost several tokens).
fn long_text(words: usize) -> String {
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    (0..words)
        .map(|i| char::from(letters[(i * 7 + i / 26) % letters.len()]).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a test body under [`TEST_LIMIT`], and says how long it took
/// (`--nocapture` shows it).
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    let started = Instant::now();
    let out = tokio::time::timeout(TEST_LIMIT, f)
        .await
        .expect("the test ran past its limit");
    let name = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("{name}: {:?}", started.elapsed());
    out
}

async fn collect(mut stream: LlmStream) -> (Vec<LlmChunk>, Option<LlmError>) {
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(c) => chunks.push(c),
            Err(e) => return (chunks, Some(e)),
        }
    }
    (chunks, None)
}

fn text_of(chunks: &[LlmChunk]) -> String {
    chunks.iter().map(|c| c.content.as_str()).collect()
}

/// `START -> answer -> END`: one Paladin node writing `answer` from the
/// `question` field.
fn one_paladin(paladin: Paladin, aegis: Aegis) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("question", DispatchRule::LastWrite),
            ("answer", DispatchRule::LastWrite),
        ]),
        EngineLimits::default(),
    );
    g.add_node(
        "answer",
        NodeSpec::paladin(
            paladin,
            InputMapping::new("{question}"),
            field_name("answer"),
        ),
    )
    .add_edge(START, "answer")
    .add_edge("answer", END)
    .set_aegis("answer", aegis);
    g
}

fn engine_over(llm: Arc<dyn LlmPort>) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_with_its_limit_and_usage() {
    bounded(async {
        let server = LocalLlm::start("completion").await;
        let llm = server.adapter();
        let r = llm
            .generate(&request(&fresh("Say something."), 8))
            .await
            .unwrap();
        assert!(!r.content.is_empty(), "{r:?}");
        assert_eq!(r.finish_reason, Some(FinishReason::Length), "{r:?}");
        let usage = r.usage.expect("the server reports usage");
        assert_eq!(usage.completion_tokens, 8, "{r:?}");
        assert!(usage.prompt_tokens > 3, "{r:?}");

        // The server (uvicorn) closes a keep-alive connection after 5 idle
        // seconds while the adapter's pool still holds it. The HTTP client
        // usually notices the close before reusing it; when the close and
        // the request cross, the adapter resends once on a new connection
        // (that race is scripted in tests/llm_contract.rs). Either way the
        // next request must not fail.
        tokio::time::sleep(Duration::from_millis(5_050)).await;
        let again = llm.generate(&request(&fresh("Again."), 2)).await.unwrap();
        assert_eq!(again.usage.map(|u| u.completion_tokens), Some(2));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stream_to_the_caller_through_a_paladin_node() {
    bounded(async {
        let server = LocalLlm::start("stream").await;

        // The adapter alone: one chunk per token and the limit as the
        // finish reason. The adapter asks for usage
        // (`stream_options.include_usage`, which OpenAI, vLLM and
        // llama-server honour), but this server ignores it: a stream from
        // it carries no usage at all, where a whole response does.
        let (chunks, error) = collect(
            server
                .adapter()
                .generate_stream(&request(&fresh("Stream please."), 12))
                .await
                .unwrap(),
        )
        .await;
        assert!(error.is_none(), "{error:?}");
        let texts = chunks.iter().filter(|c| !c.content.is_empty()).count();
        assert_eq!(texts, 12, "one chunk per token: {chunks:?}");
        let finish: Vec<_> = chunks
            .iter()
            .filter_map(|c| c.finish_reason.clone())
            .collect();
        assert_eq!(finish, vec![FinishReason::Length], "{chunks:?}");
        assert!(chunks.iter().all(|c| c.usage.is_none()), "{chunks:?}");

        // Through a Paladin node and the engine's token stream: what the
        // caller was shown is what the run merged.
        let graph = one_paladin(
            Paladin::new("Streamer")
                .with_model(MODEL)
                .with_temperature(0.0)
                .with_max_tokens(12),
            Aegis::default(),
        );
        let engine = engine_over(Arc::new(server.adapter()));
        let input = json!({"question": fresh("What streams?")});
        let mut stream = engine.stream_with(
            &graph,
            "stream-1",
            input,
            StreamOptions::new([StreamMode::Tokens]),
        );
        let mut shown = String::new();
        let mut tokens = 0;
        let outcome = loop {
            match stream.next().await.expect("a Finished event") {
                StreamEvent::Token { text, provider, .. } => {
                    assert_eq!(provider, server.name);
                    shown.push_str(&text);
                    tokens += 1;
                }
                StreamEvent::Finished(outcome) => break outcome.unwrap(),
                _ => {}
            }
        };
        assert!(tokens >= 6, "{tokens} tokens: {shown:?}");
        let state = outcome.into_result().unwrap();
        assert_eq!(state.get("answer"), Some(&json!(shown)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_and_stop_sequences() {
    bounded(async {
        let server = LocalLlm::start("stop").await;
        let llm = server.adapter();
        let prompt = fresh("Count for me.");

        // Greedy, so the same prompt gives the same text: first without a
        // stop sequence, cut by the limit.
        let whole = llm.generate(&request(&prompt, 24)).await.unwrap();
        assert_eq!(whole.finish_reason, Some(FinishReason::Length));
        assert_eq!(whole.usage.map(|u| u.completion_tokens), Some(24));
        let text = whole.content.clone();

        // A stop sequence from the middle of that text: the answer ends
        // right before its first occurrence, and says it stopped.
        let chars: Vec<char> = text.chars().collect();
        assert!(chars.len() >= 8, "too short to cut: {text:?}");
        let from = chars.len() / 2;
        let stop: String = chars[from..from + 3].iter().collect();
        let cut = text.find(&stop).unwrap();
        assert!(cut > 0, "{text:?} / {stop:?}");

        let request = request(&prompt, 24).with_stop(vec![stop.clone()]);
        let (chunks, error) = collect(llm.generate_stream(&request).await.unwrap()).await;
        assert!(error.is_none(), "{error:?}");
        let streamed = text_of(&chunks);
        assert_eq!(streamed, text[..cut], "stop {stop:?} in {text:?}");
        let finish: Vec<_> = chunks
            .iter()
            .filter_map(|c| c.finish_reason.clone())
            .collect();
        assert_eq!(finish, vec![FinishReason::Stop]);

        // The same through a Paladin's stop word.
        let graph = one_paladin(
            Paladin::new("Stopper")
                .with_model(MODEL)
                .with_temperature(0.0)
                .with_max_tokens(24)
                .with_stop_word(stop.clone()),
            Aegis::default(),
        );
        let engine = engine_over(Arc::new(llm));
        let state = engine
            .start(&graph, "stop-1", json!({"question": prompt}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(state.get("answer"), Some(&json!(&text[..cut])));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prompt_misses_the_first_chunk_deadline_and_the_chain_hops() {
    bounded(async {
        let (slow, spare) = tokio::join!(
            LocalLlm::start("deadline-a"),
            LocalLlm::start("deadline-b")
        );
        // Well under the time llama.cpp takes to read the long prompt below
        // on a fast machine (about 350 ms on this kind), so it is missed.
        let first_chunk = Duration::from_millis(100);
        let hops = CollectingTraceSink::new();
        let chain = FallbackLlmAdapter::new(vec![Arc::new(slow.adapter()), Arc::new(spare.adapter())])
            .unwrap()
            .with_provider_stream_deadlines(0, StreamDeadlines::none().with_first_chunk(first_chunk))
            .unwrap()
            .with_trace_sink(hops.clone() as Arc<dyn TraceSink>);

        // About 1,900 tokens of prompt (the context is 2,048): llama.cpp
        // reads all of it before the first token, on one thread, in 0.35 s
        // to a second here (several times the deadline, so a faster machine
        // still misses it).
        let long = request(&fresh(&long_text(1_900)), 4);
        let started = Instant::now();
        let (chunks, error) = collect(chain.generate_stream(&long).await.unwrap()).await;
        let took = started.elapsed();
        assert!(error.is_none(), "{error:?}");
        assert!(!chunks.is_empty());
        assert!(
            chunks.iter().all(|c| c.served_by() == Some(spare.name.as_str())),
            "{chunks:?}"
        );
        let events = hops.events();
        assert!(
            events.iter().any(|e| matches!(e, TraceEvent::FallbackHop { from_provider, .. } if *from_provider == slow.name)),
            "{events:?}"
        );
        // The spare read the same long prompt after the primary's deadline
        // passed: its own wait for a first chunk outlasted that deadline
        // too, so the primary did miss it for real.
        assert!(took > first_chunk * 2, "the prompt was not slow: {took:?}");
        assert!(slow.log().contains("POST /v1/chat/completions"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_stream_stops_the_generation() {
    bounded(async {
        let server = LocalLlm::start("cancel").await;
        let llm = server.adapter();
        // Room for 1,900 tokens: seconds of generation if nobody stops it.
        let mut stream = llm
            .generate_stream(&request(&fresh("Go on and on."), 1_900))
            .await
            .unwrap();
        let mut got = 0;
        while got < 3 {
            let chunk = stream.next().await.unwrap().unwrap();
            got += usize::from(!chunk.content.is_empty());
        }
        drop(stream);

        // The server notices the closed connection and stops generating:
        // it says so, and it is free for the next request at once (it
        // serves one completion at a time, so an abandoned generation
        // still running would hold the next request for seconds).
        assert!(
            server
                .wait_for_log("Disconnected from client", Duration::from_secs(10))
                .await,
            "no disconnect in the log:\n{}",
            server.log()
        );
        let started = Instant::now();
        let next = llm.generate(&request(&fresh("Next."), 2)).await.unwrap();
        assert_eq!(next.usage.map(|u| u.completion_tokens), Some(2));
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_millis(1_500),
            "the next request waited {waited:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_stream_the_retry_hops_to_the_spare() {
    bounded(async {
        let (doomed, spare) = tokio::join!(LocalLlm::start("kill-a"), LocalLlm::start("kill-b"));
        let chain =
            FallbackLlmAdapter::new(vec![Arc::new(doomed.adapter()), Arc::new(spare.adapter())])
                .unwrap();
        let graph = one_paladin(
            Paladin::new("Survivor")
                .with_model(MODEL)
                .with_temperature(0.0)
                .with_max_tokens(200),
            Aegis::new().with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_interval(Duration::from_millis(50))
                    .with_jitter(false),
            ),
        );
        let engine = engine_over(Arc::new(chain));
        let mut stream = engine.stream_with(
            &graph,
            "kill-1",
            json!({"question": fresh("Survive this.")}),
            StreamOptions::new([StreamMode::Tokens]),
        );
        let mut shown = String::new();
        let mut abandoned = Vec::new();
        let mut providers = Vec::new();
        let mut killed = false;
        let outcome = loop {
            match stream.next().await.expect("a Finished event") {
                StreamEvent::Token {
                    text,
                    provider,
                    attempt,
                    ..
                } => {
                    if !killed {
                        doomed.kill();
                        killed = true;
                    }
                    providers.push((attempt, provider));
                    shown.push_str(&text);
                }
                StreamEvent::AttemptAbandoned { attempt, .. } => {
                    abandoned.push(attempt);
                    shown.clear();
                }
                StreamEvent::Finished(outcome) => break outcome.unwrap(),
                _ => {}
            }
        };
        // Attempt 1 streamed from the doomed server and was abandoned;
        // attempt 2 found it refusing connections and hopped to the spare.
        assert_eq!(abandoned, vec![1], "{providers:?}");
        assert_eq!(
            providers.first().map(|p| p.1.as_str()),
            Some(doomed.name.as_str())
        );
        let second: Vec<_> = providers.iter().filter(|p| p.0 == 2).collect();
        assert!(!second.is_empty());
        assert!(second.iter().all(|p| p.1 == spare.name), "{providers:?}");
        let state = outcome.into_result().unwrap();
        assert_eq!(state.get("answer"), Some(&json!(shown)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_mustered_tasks_at_once() {
    bounded(async {
        let server = LocalLlm::start("muster").await;
        let plan = NodeSpec::from_fn("plan", |_, _| {
            Box::pin(async {
                let tasks = (0..8).map(|i| {
                    (
                        format!("q{i}"),
                        json!({"question": fresh(&format!("Question {i}?"))}),
                    )
                });
                Ok(Directive::muster(StateDelta::new(), "answer", tasks))
            })
        });
        let mut graph = WarGraph::new(
            schema(&[("answers", DispatchRule::Append)]),
            EngineLimits::default(),
        );
        graph
            .add_node("plan", plan)
            .add_worker_template(
                "answer",
                NodeSpec::paladin(
                    Paladin::new("Answerer")
                        .with_model(MODEL)
                        .with_temperature(0.0)
                        .with_max_tokens(6),
                    InputMapping::new("[{task.key}] {task.question}"),
                    field_name("answers"),
                ),
            )
            .declare_task_fields("answer", ["question"])
            .add_edge(START, "plan")
            .add_edge("answer", END);
        let engine = engine_over(Arc::new(server.adapter()));
        let state = engine
            .start(&graph, "muster-1", json!({}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        let answers = state.get("answers").unwrap();
        let answers = answers.as_array().unwrap();
        assert_eq!(answers.len(), 8, "{answers:?}");
        assert!(
            answers
                .iter()
                .all(|a| a.as_str().is_some_and(|s| !s.is_empty()))
        );
        let served = server.log().matches("POST /v1/chat/completions").count();
        assert_eq!(served, 8);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_context_is_context_length_exceeded() {
    bounded(async {
        let server = LocalLlm::start("overflow").await;
        let llm = server.adapter();
        let too_long = request(&fresh(&long_text(2_500)), 4);
        let streamed = llm.generate_stream(&too_long).await.err();
        let whole = llm.generate(&too_long).await.err();
        for e in [streamed, whole] {
            match e {
                Some(e @ LlmError::ContextLengthExceeded(_)) => {
                    assert_eq!(e.transience(), Transience::Permanent);
                }
                other => panic!("expected ContextLengthExceeded, got {other:?}"),
            }
        }
    })
    .await;
}

/// A tool the model may call: the weather in one of two cities.
struct Weather {
    calls: std::sync::Mutex<Vec<serde_json::Value>>,
}

#[async_trait]
impl Armament for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "The weather in a city"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Oslo", "Paris"]}},
            "required": ["city"]
        })
    }
    async fn invoke(
        &self,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, PaladinError> {
        self.calls.lock().unwrap().push(arguments);
        Ok(json!("rain"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_round_trip_through_a_paladin() {
    bounded(async {
        let server = LocalLlm::start("tools").await;
        let weather = Arc::new(Weather {
            calls: std::sync::Mutex::new(Vec::new()),
        });
        let tools = vec![ToolDefinition::new(
            weather.name(),
            weather.description(),
            weather.parameters(),
        )];

        // The adapter alone: the server's function-calling format constrains
        // the output with a grammar from the schema, so even random weights
        // call the tool with valid arguments.
        let r = server
            .adapter()
            .generate(&request("What is the weather in Oslo?", 32).with_tools(tools))
            .await
            .unwrap();
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls), "{r:?}");
        assert_eq!(r.tool_calls.len(), 1, "{r:?}");
        assert_eq!(r.tool_calls[0].name, "get_weather");
        let city = r.tool_calls[0].arguments["city"]
            .as_str()
            .unwrap_or_default();
        assert!(["Oslo", "Paris"].contains(&city), "{r:?}");

        // Through a streaming Paladin: the server cannot stream an automatic
        // tool choice (its stream comes back empty), so the adapter asks
        // again without streaming; the call runs, and the second round
        // sends the assistant's tool turn and the result back. Random
        // weights call the tool again rather than answer, so the run ends
        // at its loop bound: what matters is that every round was served.
        let graph = one_paladin(
            Paladin::new("Forecaster")
                .with_model(MODEL)
                .with_temperature(0.0)
                .with_max_tokens(32)
                .with_max_loops(2)
                .with_armament(weather.clone()),
            Aegis::default(),
        );
        let engine = engine_over(Arc::new(server.adapter()));
        let outcome = engine
            .start(
                &graph,
                "tools-1",
                json!({"question": "What is the weather in Oslo?"}),
            )
            .await
            .unwrap();
        let calls = weather.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 2, "{outcome:?}");
        for c in &calls {
            assert!(
                ["Oslo", "Paris"].contains(&c["city"].as_str().unwrap_or_default()),
                "{c}"
            );
        }
        match outcome.into_result() {
            Ok(state) => assert!(state.get("answer").is_some()),
            Err(e) => assert!(e.to_string().contains("max_loops (2)"), "{e}"),
        }
        // The adapter's request, then per round a streamed one (empty) and
        // its resend.
        let served = server.log().matches("POST /v1/chat/completions").count();
        assert_eq!(served, 1 + 2 * 2);
    })
    .await;
}
