//! `WarEngine::stream`: run events and Paladin tokens while the run goes,
//! ending with its outcome. Tokens are retry-aware: an attempt that streamed
//! and is then abandoned (an error after chunks, a timeout, a shutdown) is
//! named by an `AttemptAbandoned` before any token of the next attempt, so
//! the tokens minus the abandoned attempts' are exactly the merged answer.
//! All on the paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::engine::InterceptorDecision;
use aegis::engine::NodeInterceptor;
use aegis::engine::RunStream;
use aegis::engine::StreamMode;
use aegis::engine::StreamOptions;
use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::graph::ParleyResponse;
use aegis::id::battalion_thread_id;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmChunk;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::LlmResponse;
use aegis::llm::LlmStream;
use aegis::llm::MockLlmAdapter;
use aegis::llm::MockStreamStep;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::prelude::*;
use aegis::trace::AttemptStatus;
use aegis::trace::TraceEvent;
use aegis::waypoint::WaypointStatus;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

// ---- helpers -------------------------------------------------------------

/// Every event of `stream`, and the outcome its last event carried.
async fn drain(mut stream: RunStream) -> (Vec<StreamEvent>, Result<RunOutcome, EngineError>) {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Finished(outcome) = event {
            assert!(stream.next().await.is_none(), "Finished is the last event");
            return (events, outcome);
        }
        events.push(event);
    }
    panic!("the stream ended without Finished");
}

/// The attempt-level events as short lines: what the tests compare.
fn lines(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Trace(TraceEvent::NodeStarted {
                node_id, attempt, ..
            }) => Some(format!("{node_id} started {attempt}")),
            StreamEvent::Trace(TraceEvent::NodeFinished {
                node_id,
                attempt,
                status,
                ..
            }) => {
                let status = match status {
                    AttemptStatus::Succeeded => "succeeded",
                    AttemptStatus::Failed(_) => "failed",
                    _ => "skipped",
                };
                Some(format!("{node_id} {status} {attempt}"))
            }
            StreamEvent::Trace(TraceEvent::RetryScheduled {
                node_id,
                attempt,
                delay,
                ..
            }) => Some(format!("{node_id} retry {attempt} in {delay:?}")),
            StreamEvent::Token {
                attempt,
                provider,
                text,
                ..
            } => Some(format!("token {attempt} {provider} {text:?}")),
            StreamEvent::AttemptAbandoned { attempt, .. } => Some(format!("abandoned {attempt}")),
            _ => None,
        })
        .collect()
}

/// What a UI shows: every token, minus those of abandoned attempts, per
/// (node, task).
fn shown(events: &[StreamEvent]) -> BTreeMap<(String, Option<String>), String> {
    let abandoned: BTreeSet<(String, Option<String>, u32)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::AttemptAbandoned {
                node_id,
                task_key,
                attempt,
                ..
            } => Some((node_id.to_string(), task_key.clone(), *attempt)),
            _ => None,
        })
        .collect();
    let mut out: BTreeMap<(String, Option<String>), String> = BTreeMap::new();
    for e in events {
        if let StreamEvent::Token {
            node_id,
            task_key,
            attempt,
            text,
            ..
        } = e
            && !abandoned.contains(&(node_id.to_string(), task_key.clone(), *attempt))
        {
            out.entry((node_id.to_string(), task_key.clone()))
                .or_default()
                .push_str(text);
        }
    }
    out
}

fn shown_answer(events: &[StreamEvent]) -> String {
    shown(events)
        .remove(&("writer".to_string(), None))
        .unwrap_or_default()
}

fn text(t: &str) -> Result<LlmChunk, LlmError> {
    Ok(LlmChunk::text(t))
}

fn reset() -> LlmError {
    LlmError::NetworkError("connection reset".into())
}

fn unavailable() -> LlmError {
    LlmError::ProviderError {
        provider: "primary".into(),
        status: 503,
        message: "busy".into(),
        retry_after: None,
    }
}

/// `START -> writer -> END`, writer a Paladin answering `question` into
/// `answer`.
fn graph(aegis: Aegis) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        "writer",
        NodeSpec::paladin(
            Paladin::new("Writer").with_model("m"),
            InputMapping::new("Answer: {question}"),
            field_name("answer"),
        ),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    g.set_aegis("writer", aegis);
    g
}

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_initial_interval(Duration::from_millis(100))
        .with_jitter(false)
}

fn retrying() -> Aegis {
    Aegis::new().with_retry(retry(2))
}

fn engine_over(llm: Arc<dyn LlmPort>) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(InMemoryWaypointStore::new()).with_llm(llm)
}

fn answer(outcome: &RunOutcome) -> String {
    match outcome.state().get("answer") {
        Some(Value::String(s)) => s.clone(),
        other => panic!("no answer: {other:?} in {outcome:?}"),
    }
}

// ---- tokens and abandonment ---------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_retry_abandons_the_streamed_attempt_before_the_next_one_streams() {
    let mock = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_stream(vec![text("The cap"), text("ital is"), Err(reset())])
        .with_stream(vec![text("Paris"), text(".")]);
    let stream = engine_over(Arc::new(mock)).stream(
        &graph(retrying()),
        "t",
        json!({"question": "capital of France?"}),
    );
    let (events, outcome) = drain(stream).await;
    let outcome = outcome.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(
        lines(&events),
        [
            "writer started 1",
            "token 1 openai \"The cap\"",
            "token 1 openai \"ital is\"",
            "abandoned 1",
            "writer failed 1",
            "writer retry 2 in 100ms",
            "writer started 2",
            "token 2 openai \"Paris\"",
            "token 2 openai \".\"",
            "writer succeeded 2",
        ]
    );
    let reason = events.iter().find_map(|e| match e {
        StreamEvent::AttemptAbandoned { reason, .. } => Some(reason),
        _ => None,
    });
    match reason {
        Some(AttemptStatus::Failed(e)) => assert!(e.to_string().contains("connection reset")),
        other => panic!("{other:?}"),
    }
    assert_eq!(shown_answer(&events), answer(&outcome));
    assert_eq!(answer(&outcome), "Paris.");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_after_two_tokens_abandons_them_at_the_deadline() {
    let mock = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_stream_steps(vec![
            MockStreamStep::Item(text("Hel")),
            MockStreamStep::Pause(Duration::from_millis(200)),
            MockStreamStep::Item(text("lo")),
            MockStreamStep::Stall,
        ])
        .with_stream(vec![text("Hi")]);
    let aegis = Aegis::new()
        .with_retry(retry(2))
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(1)));
    let started = tokio::time::Instant::now();
    let mut stream =
        engine_over(Arc::new(mock)).stream(&graph(aegis), "t", json!({"question": "hi?"}));
    let mut events = Vec::new();
    let mut abandoned_at = None;
    let outcome = loop {
        match stream.next().await.unwrap() {
            StreamEvent::Finished(o) => break o.unwrap(),
            e => {
                if matches!(e, StreamEvent::AttemptAbandoned { .. }) {
                    abandoned_at = Some(started.elapsed());
                }
                events.push(e);
            }
        }
    };
    assert_eq!(
        lines(&events),
        [
            "writer started 1",
            "token 1 openai \"Hel\"",
            "token 1 openai \"lo\"",
            "abandoned 1",
            "writer failed 1",
            "writer retry 2 in 100ms",
            "writer started 2",
            "token 2 openai \"Hi\"",
            "writer succeeded 2",
        ]
    );
    // Abandoned when the run timeout cut the attempt, not later.
    assert_eq!(abandoned_at, Some(Duration::from_secs(1)));
    match events.iter().find_map(|e| match e {
        StreamEvent::AttemptAbandoned { reason, .. } => Some(reason.clone()),
        _ => None,
    }) {
        Some(AttemptStatus::Failed(e)) => {
            assert_eq!(e.source, NodeErrorSource::Timeout(TimeoutKind::Run));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(shown_answer(&events), "Hi");
    assert_eq!(answer(&outcome), "Hi");
}

#[tokio::test(start_paused = true)]
async fn a_fallback_hop_before_the_first_chunk_streams_nothing_from_the_failed_provider() {
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_stream(vec![Err(unavailable())]);
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_stream(vec![text("from "), text("backup")]);
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap();
    let stream =
        engine_over(Arc::new(chain)).stream(&graph(retrying()), "t", json!({"question": "q"}));
    let (events, outcome) = drain(stream).await;
    assert_eq!(
        lines(&events),
        [
            "writer started 1",
            "token 1 backup \"from \"",
            "token 1 backup \"backup\"",
            "writer succeeded 1",
        ]
    );
    assert_eq!(answer(&outcome.unwrap()), "from backup");
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_first_chunk_is_abandoned_and_the_retry_hops_to_the_backup() {
    // A chain never completes a partial answer with another model: the
    // error after "Par" fails the attempt; the retry starts the chain over,
    // the primary is down by then, and the backup answers.
    let primary = MockLlmAdapter::new()
        .with_provider_name("primary")
        .with_stream(vec![text("Par"), Err(unavailable())])
        .with_stream(vec![Err(unavailable())]);
    let backup = MockLlmAdapter::new()
        .with_provider_name("backup")
        .with_stream(vec![text("Rome")]);
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap();
    let stream =
        engine_over(Arc::new(chain)).stream(&graph(retrying()), "t", json!({"question": "q"}));
    let (events, outcome) = drain(stream).await;
    assert_eq!(
        lines(&events),
        [
            "writer started 1",
            "token 1 primary \"Par\"",
            "abandoned 1",
            "writer failed 1",
            "writer retry 2 in 100ms",
            "writer started 2",
            "token 2 backup \"Rome\"",
            "writer succeeded 2",
        ]
    );
    let outcome = outcome.unwrap();
    assert_eq!(shown_answer(&events), answer(&outcome));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_fails_before_any_token_is_not_announced_as_abandoned() {
    let mock = MockLlmAdapter::new()
        .with_error(reset())
        .with_stream(vec![text("ok")]);
    let stream =
        engine_over(Arc::new(mock)).stream(&graph(retrying()), "t", json!({"question": "q"}));
    let (events, outcome) = drain(stream).await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::AttemptAbandoned { .. })),
        "{:?}",
        lines(&events)
    );
    assert_eq!(answer(&outcome.unwrap()), "ok");
}

/// Discards every success of the node it watches.
struct DiscardAfter;

#[async_trait]
impl NodeInterceptor for DiscardAfter {
    async fn after(&self, _: &NodeId, _: &Directive) -> InterceptorDecision {
        InterceptorDecision::Skip
    }
}

#[tokio::test(start_paused = true)]
async fn a_success_an_interceptor_discards_is_abandoned_too() {
    let mock = MockLlmAdapter::new().with_stream(vec![text("never "), text("merged")]);
    let engine = engine_over(Arc::new(mock)).with_interceptor(DiscardAfter);
    let options = StreamOptions::new([StreamMode::Tokens]);
    let stream = engine.stream_with(
        &graph(Aegis::default()),
        "t",
        json!({"question": "q"}),
        options,
    );
    let (events, outcome) = drain(stream).await;
    assert_eq!(
        lines(&events),
        [
            "token 1 mock \"never \"",
            "token 1 mock \"merged\"",
            "abandoned 1"
        ]
    );
    assert_eq!(outcome.unwrap().state().get("answer"), None);
    assert_eq!(shown_answer(&events), "");
}

/// Answers each prompt by spelling its last word one letter per chunk, a
/// chunk every `every`: concurrent tasks' tokens interleave.
struct Speller {
    every: Duration,
}

#[async_trait]
impl LlmPort for Speller {
    async fn generate(&self, _: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Err(LlmError::InvalidRequest("stream only".into()))
    }

    async fn generate_stream(&self, request: &LlmRequest) -> Result<LlmStream, LlmError> {
        let prompt = request.messages.last().unwrap().content.clone();
        let word = prompt
            .split(' ')
            .next_back()
            .unwrap_or_default()
            .to_string();
        let every = self.every;
        let letters: Vec<String> = word.chars().map(String::from).collect();
        Ok(Box::pin(futures::stream::iter(letters).then(
            move |l| async move {
                tokio::time::sleep(every).await;
                Ok(LlmChunk::text(l))
            },
        )))
    }

    fn get_provider_name(&self) -> &str {
        "speller"
    }
}

#[tokio::test(start_paused = true)]
async fn mustered_tasks_stream_concurrently_each_token_tagged_with_its_task() {
    let words = ["alpha", "bravo", "charlie", "delta"];
    let plan = NodeSpec::from_fn("plan", move |_, _| {
        Box::pin(async move {
            let tasks = words.iter().map(|w| (w.to_string(), json!({"word": w})));
            Ok(Directive::muster(StateDelta::new(), "spell", tasks))
        })
    });
    let mut g = WarGraph::new(schema(&[("answers", Append)]), EngineLimits::default());
    g.add_node("plan", plan)
        .add_worker_template(
            "spell",
            NodeSpec::paladin(
                Paladin::new("Speller").with_model("m"),
                InputMapping::new("[{task.key}] spell {task.word}"),
                field_name("answers"),
            ),
        )
        .add_edge(START, "plan")
        .add_edge("spell", END);
    g.declare_task_fields("spell", ["word"]);
    let llm = Arc::new(Speller {
        every: Duration::from_millis(10),
    });
    let stream =
        engine_over(llm).stream_with(&g, "t", json!({}), StreamOptions::new([StreamMode::Tokens]));
    let (events, outcome) = drain(stream).await;
    let outcome = outcome.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");

    // Only tokens were asked for.
    assert!(
        events
            .iter()
            .all(|e| matches!(e, StreamEvent::Token { .. })),
        "{events:?}"
    );
    // Each task's tokens spell its own word...
    let shown = shown(&events);
    for w in words {
        assert_eq!(shown[&("spell".to_string(), Some(w.to_string()))], w);
    }
    // ... and the answers merged are those words.
    let merged: BTreeSet<&str> = outcome
        .state()
        .get("answers")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(merged, words.into_iter().collect());
    // The tasks ran at once: their first letters came before anyone's second.
    let tasks: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Token { task_key, .. } => task_key.as_deref(),
            _ => None,
        })
        .collect();
    let first_four: BTreeSet<&str> = tasks[..4].iter().copied().collect();
    assert_eq!(first_four, words.into_iter().collect());
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_engine_mid_stream_abandons_the_attempt_and_halts_the_run() {
    let mock = MockLlmAdapter::new().with_stream_steps(vec![
        MockStreamStep::Item(text("one ")),
        MockStreamStep::Item(text("two ")),
        MockStreamStep::Stall,
    ]);
    let engine = engine_over(Arc::new(mock));
    let mut stream = engine.stream(&graph(Aegis::default()), "t", json!({"question": "q"}));
    let mut events = Vec::new();
    let outcome = loop {
        match stream.next().await.unwrap() {
            StreamEvent::Finished(o) => break o.unwrap(),
            e => {
                let second = matches!(&e, StreamEvent::Token { text, .. } if text == "two ");
                events.push(e);
                if second {
                    engine.cancellation().cancel();
                }
            }
        }
    };
    assert!(matches!(outcome, RunOutcome::Halted { .. }), "{outcome:?}");
    assert_eq!(
        lines(&events),
        [
            "writer started 1",
            "token 1 mock \"one \"",
            "token 1 mock \"two \"",
            "abandoned 1",
            "writer skipped 1",
        ]
    );
    assert!(events.iter().any(|e| matches!(
        e,
        StreamEvent::AttemptAbandoned {
            reason: AttemptStatus::Skipped { .. },
            ..
        }
    )));
    assert_eq!(shown_answer(&events), "");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_halts_the_run_resumably() {
    let mock = MockLlmAdapter::new().with_stream_steps(vec![
        MockStreamStep::Item(text("one ")),
        MockStreamStep::Stall,
    ]);
    let engine = engine_over(Arc::new(mock));
    let mut stream = engine.stream(&graph(Aegis::default()), "t", json!({"question": "q"}));
    while let Some(e) = stream.next().await {
        if matches!(e, StreamEvent::Token { .. }) {
            break;
        }
    }
    drop(stream);
    // The run's task halts on its own (the attempt's shutdown grace).
    tokio::time::sleep(Duration::from_secs(60)).await;
    let latest = engine.store().latest("t").await.unwrap().unwrap();
    assert!(
        matches!(latest.status, WaypointStatus::Halted { .. }),
        "{:?}",
        latest.status
    );
    assert!(
        !engine.cancellation().is_cancelled(),
        "only the stream's run halts"
    );
}

#[tokio::test(start_paused = true)]
async fn without_llm_streaming_a_whole_completion_is_one_token() {
    let mock = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_error(reset())
        .with_response("whole answer");
    let service = PaladinExecutionService::new(mock).with_streaming(false);
    let engine = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(service);
    let options = StreamOptions::new([StreamMode::Tokens]);
    let stream = engine.stream_with(&graph(retrying()), "t", json!({"question": "q"}), options);
    let (events, outcome) = drain(stream).await;
    assert_eq!(lines(&events), ["token 2 openai \"whole answer\""]);
    assert_eq!(answer(&outcome.unwrap()), "whole answer");
}

#[tokio::test(start_paused = true)]
async fn outcome_waits_for_the_run_without_reading_its_events() {
    let mock = MockLlmAdapter::new().with_stream(vec![text("a"), text("b"), text("c")]);
    let stream = engine_over(Arc::new(mock)).stream_with(
        &graph(Aegis::default()),
        "t",
        json!({"question": "q"}),
        StreamOptions::default().with_capacity(1),
    );
    let outcome = stream.outcome().await.unwrap();
    assert_eq!(answer(&outcome), "abc");
}

#[tokio::test(start_paused = true)]
async fn a_battalion_childs_tokens_reach_the_parents_stream_tagged_with_the_child_thread() {
    let mock = MockLlmAdapter::new()
        .with_stream(vec![text("half"), Err(reset())])
        .with_stream(vec![text("whole")]);
    let mut parent = WarGraph::new(
        schema(&[("q", LastWrite), ("a", LastWrite)]),
        EngineLimits::default(),
    );
    parent
        .add_node(
            "sub",
            NodeSpec::battalion(
                graph(retrying()),
                vec![(field_name("q"), field_name("question"))],
                vec![(field_name("answer"), field_name("a"))],
            ),
        )
        .add_edge(START, "sub")
        .add_edge("sub", END);
    let options = StreamOptions::new([StreamMode::Tokens]);
    let stream = engine_over(Arc::new(mock)).stream_with(&parent, "p", json!({"q": "?"}), options);
    let (events, outcome) = drain(stream).await;
    let tagged: Vec<(String, String)> = events
        .iter()
        .map(|e| match e {
            StreamEvent::Token {
                thread_id, text, ..
            } => (thread_id.clone(), text.clone()),
            StreamEvent::AttemptAbandoned { thread_id, .. } => {
                (thread_id.clone(), "(abandoned)".to_string())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let child = battalion_thread_id("p", &NodeId::new("sub"), 1);
    assert_eq!(
        tagged,
        [
            (child.clone(), "half".to_string()),
            (child.clone(), "(abandoned)".to_string()),
            (child, "whole".to_string()),
        ]
    );
    assert_eq!(outcome.unwrap().state().get("a"), Some(&json!("whole")));
}

// ---- run events, modes, custom events -------------------------------------

#[tokio::test(start_paused = true)]
async fn run_events_cover_supersteps_updates_values_and_the_end() {
    let g = chain(
        schema(&[("a", LastWrite), ("b", LastWrite)]),
        vec![
            ("first", write("a", json!(1))),
            ("second", write("b", json!(2))),
        ],
    );
    let (events, outcome) = drain(engine().stream(&g, "t", json!({}))).await;
    assert!(outcome.unwrap().is_completed());
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            StreamEvent::Trace(t) => t.to_string(),
            StreamEvent::Updates {
                superstep, writes, ..
            } => format!(
                "updates {superstep}: {}",
                writes
                    .iter()
                    .map(|w| format!("{} {}", w.node_id, serde_json::to_string(&w.delta).unwrap()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            StreamEvent::Values {
                superstep, state, ..
            } => format!("values {superstep}: {}", state.to_json()),
            other => format!("{other:?}"),
        })
        .map(|l| {
            // Durations vary with nothing on the paused clock, but keep the
            // lines independent of their formatting.
            l.split(" in ").next().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "[t] run started",
            "[t] superstep 1 runs first",
            "[t] superstep 1: first attempt 1 started",
            "[t] superstep 1: first attempt 1 succeeded",
            "updates 1: first {\"writes\":{\"a\":1}}",
            "values 1: {\"a\":1}",
            "[t] superstep 1 done, next: second",
            "[t] superstep 2 runs second",
            "[t] superstep 2: second attempt 1 started",
            "[t] superstep 2: second attempt 1 succeeded",
            "updates 2: second {\"writes\":{\"b\":2}}",
            "values 2: {\"a\":1,\"b\":2}",
            "[t] superstep 2 done, next: (none)",
            "[t] run finished: Completed",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn modes_select_what_the_stream_carries() {
    let g = chain(
        schema(&[("a", LastWrite)]),
        vec![("only", write("a", json!(1)))],
    );
    let options = StreamOptions::new([StreamMode::Values, StreamMode::Updates]);
    let (events, _) = drain(engine().stream_with(&g, "t", json!({}), options)).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(
        events[0],
        StreamEvent::Updates { superstep: 1, .. }
    ));
    assert!(matches!(
        events[1],
        StreamEvent::Values { superstep: 1, .. }
    ));

    let none = StreamOptions::new([]);
    let (events, outcome) = drain(engine().stream_with(&g, "u", json!({}), none)).await;
    assert!(events.is_empty(), "{events:?}");
    assert!(outcome.unwrap().is_completed());
}

#[tokio::test(start_paused = true)]
async fn ctx_emit_streams_custom_payloads_and_counts_as_a_heartbeat() {
    // Three steps of 600 ms under a 1 s idle window: only the emits' beats
    // keep the attempt alive.
    let worker = NodeSpec::from_fn("worker", |_, ctx| {
        let ctx = ctx.clone();
        Box::pin(async move {
            for step in 1..=3 {
                tokio::time::sleep(Duration::from_millis(600)).await;
                ctx.emit(json!({"step": step}));
            }
            Ok(delta(&[("done", json!(true))]).into())
        })
    });
    let mut g = chain(schema(&[("done", LastWrite)]), vec![("worker", worker)]);
    g.set_aegis(
        "worker",
        Aegis::new().with_timeout(TimeoutPolicy::idle(Duration::from_secs(1))),
    );
    let options = StreamOptions::new([StreamMode::Custom]);
    let (events, outcome) = drain(engine().stream_with(&g, "t", json!({}), options)).await;
    assert!(outcome.unwrap().is_completed());
    let payloads: Vec<(String, u32, Value)> = events
        .iter()
        .map(|e| match e {
            StreamEvent::Custom {
                node_id,
                attempt,
                payload,
                ..
            } => (node_id.to_string(), *attempt, payload.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        payloads,
        (1..=3)
            .map(|s| ("worker".to_string(), 1, json!({"step": s})))
            .collect::<Vec<_>>()
    );

    // The same node under `start`: no stream, still beats.
    let outcome = engine().start(&g, "u", json!({})).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_handler_a_parley_and_a_streamed_resume() {
    let g = routed_to_compensate();
    let (events, _) = drain(engine().stream(&g, "t", json!({}))).await;
    let handled = events.iter().find_map(|e| match e {
        StreamEvent::Trace(t @ TraceEvent::HandlerRan { .. }) => Some(t.to_string()),
        _ => None,
    });
    assert_eq!(
        handled.as_deref(),
        Some("[t] superstep 1: fails failed, handled by its route handler")
    );

    let mut g = WarGraph::new(schema(&[("x", LastWrite)]), EngineLimits::default());
    g.add_node("ask", NodeSpec::gate("Ship it?", "yes", "no"))
        .add_node("yes", write("x", json!("shipped")))
        .add_node("no", write("x", json!("held")))
        .add_edge(START, "ask")
        .add_edge("yes", END)
        .add_edge("no", END);
    let engine = engine();
    let (events, outcome) = drain(engine.stream(&g, "p", json!({}))).await;
    assert!(matches!(outcome.unwrap(), RunOutcome::AwaitingInput { .. }));
    let asked = events.iter().find_map(|e| match e {
        StreamEvent::Trace(t @ TraceEvent::ParleyRaised { .. }) => Some(t.to_string()),
        _ => None,
    });
    assert_eq!(
        asked.as_deref(),
        Some("[p] superstep 1: ask asks: Ship it?")
    );
    let resumed = engine.stream_resume(&g, "p", Some(ParleyResponse::new(json!("yes"))));
    let outcome = resumed.outcome().await.unwrap();
    assert_eq!(outcome.state().get("x"), Some(&json!("shipped")));
}

#[test]
fn a_run_stream_can_move_between_tasks() {
    fn sendable<T: Send + Unpin + 'static>() {}
    sendable::<RunStream>();
    sendable::<StreamEvent>();
}

#[tokio::test(start_paused = true)]
async fn an_error_start_would_return_ends_the_stream() {
    let g = chain(
        schema(&[("a", LastWrite)]),
        vec![("only", write("a", json!(1)))],
    );
    let (events, outcome) = drain(engine().stream(&g, "bad>id", json!({}))).await;
    assert!(events.is_empty(), "{events:?}");
    assert!(
        matches!(outcome, Err(EngineError::InvalidThreadId(_))),
        "{outcome:?}"
    );
}

// ---- backpressure --------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_consumer_that_never_reads_blocks_nothing_and_learns_what_it_lost() {
    let nodes: Vec<(String, NodeSpec)> = (0..50)
        .map(|i| (format!("n{i:02}"), write("a", json!(i))))
        .collect();
    let g = chain(
        schema(&[("a", LastWrite)]),
        nodes
            .iter()
            .map(|(id, s)| (id.as_str(), s.clone()))
            .collect(),
    );
    // Everything the run emits, read as it comes.
    let (all, _) = drain(engine().stream(&g, "t", json!({}))).await;
    assert!(!all.iter().any(|e| matches!(e, StreamEvent::Lagged { .. })));

    let engine = engine();
    let stream = engine.stream_with(
        &g,
        "t",
        json!({}),
        StreamOptions::default().with_capacity(8),
    );
    // Nobody reads, yet the run completes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let latest = engine.store().latest("t").await.unwrap().unwrap();
    assert_eq!(latest.status, WaypointStatus::Completed);

    let (events, outcome) = drain(stream).await;
    assert!(outcome.unwrap().is_completed());
    assert_eq!(events.len(), 9, "{events:?}");
    // The first eight, as they were emitted, then the count of the rest.
    for (got, want) in events[..8].iter().zip(&all) {
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
    match events[8] {
        StreamEvent::Lagged { dropped } => assert_eq!(dropped as usize, all.len() - 8),
        ref other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_abandonment_marker_is_never_dropped_however_far_the_consumer_lags() {
    let mock = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_stream(vec![
            text("a1"),
            text("a2"),
            text("a3"),
            text("a4"),
            text("a5"),
            Err(reset()),
        ])
        .with_stream(vec![text("b1"), text("b2")]);
    let engine = engine_over(Arc::new(mock));
    let stream = engine.stream_with(
        &graph(retrying()),
        "t",
        json!({"question": "?"}),
        StreamOptions::new([StreamMode::Tokens]).with_capacity(4),
    );
    // The consumer reads nothing until the run is over.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (events, outcome) = drain(stream).await;
    let outcome = outcome.unwrap();
    let summary: Vec<String> = events
        .iter()
        .map(|e| match e {
            StreamEvent::Token { text, .. } => text.clone(),
            StreamEvent::Lagged { dropped } => format!("lagged {dropped}"),
            StreamEvent::AttemptAbandoned { attempt, .. } => format!("abandoned {attempt}"),
            other => format!("{other:?}"),
        })
        .collect();
    // The queue held four tokens; the fifth was dropped and counted, the
    // marker came in order whatever the backlog, and the next attempt's
    // tokens, arriving at a full queue, were dropped and counted too.
    assert_eq!(
        summary,
        [
            "a1",
            "a2",
            "a3",
            "a4",
            "lagged 1",
            "abandoned 1",
            "lagged 2"
        ]
    );
    // What a UI following the recipe shows holds nothing of attempt 1.
    assert_eq!(shown_answer(&events), "");
    assert_eq!(answer(&outcome), "b1b2");
}
