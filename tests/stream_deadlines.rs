//! Two stream deadlines: before a completion's first chunk a silent
//! provider is a transient failure the fallback chain hops past; after a
//! chunk, a stall is the idle timeout and is never hopped. All on the paused
//! clock, so every instant is exact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::error::Transience;
use aegis::llm::FallbackChainError;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmChunk;
use aegis::llm::LlmMessage;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::MockLlmAdapter;
use aegis::llm::MockStreamStep;
use aegis::llm::StreamDeadlines;
use aegis::paladin::PaladinExecutionService;
use aegis::prelude::*;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::waypoint::NodeStatus;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;
use tokio::time::Instant;

const S: fn(u64) -> Duration = Duration::from_secs;

fn mock(name: &str) -> MockLlmAdapter {
    MockLlmAdapter::new().with_provider_name(name)
}

fn ports(mocks: &[&MockLlmAdapter]) -> Vec<Arc<dyn LlmPort>> {
    mocks
        .iter()
        .map(|m| Arc::new((*m).clone()) as Arc<dyn LlmPort>)
        .collect()
}

/// A provider that never sends its first chunk.
fn silent(name: &str) -> MockLlmAdapter {
    mock(name).with_stream_steps(vec![MockStreamStep::Stall])
}

/// A provider that sends one chunk, then stalls.
fn stalls_after_a_chunk(name: &str) -> MockLlmAdapter {
    mock(name).with_stream_steps(vec![
        MockStreamStep::Item(Ok(LlmChunk::text("partial"))),
        MockStreamStep::Stall,
    ])
}

/// `START -> answer -> END`, `answer` a Paladin over `llm` under `timeout`.
fn paladin_run(
    llm: Arc<dyn LlmPort>,
    timeout: TimeoutPolicy,
) -> (WarEngine<InMemoryWaypointStore>, WarGraph) {
    let port = Arc::new(PaladinExecutionService::new(llm));
    let g = one_paladin(Aegis::new().with_timeout(timeout));
    (
        WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port),
        g,
    )
}

fn first_chunk_and_idle(first_chunk: u64, idle: u64) -> TimeoutPolicy {
    TimeoutPolicy::idle(S(idle)).with_first_chunk(S(first_chunk))
}

#[tokio::test(start_paused = true)]
async fn a_provider_silent_before_its_first_chunk_is_hopped_at_the_node_deadline() {
    let (primary, backup) = (silent("openai"), mock("ollama").with_response("hello"));
    let sink = CollectingTraceSink::new();
    let chain = FallbackLlmAdapter::new(ports(&[&primary, &backup]))
        .unwrap()
        .with_trace_sink(sink.clone());
    let (e, g) = paladin_run(Arc::new(chain), first_chunk_and_idle(5, 10));

    let started = Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(
        started.elapsed(),
        S(5),
        "hopped exactly at the first-chunk deadline"
    );
    assert_eq!(state.get("answer"), Some(&json!("hello")));
    assert_eq!((primary.call_count(), backup.call_count()), (1, 1));
    assert_eq!(
        sink.events(),
        vec![TraceEvent::FallbackHop {
            node_id: None,
            from_provider: "openai".into(),
            to_provider: "ollama".into(),
        }]
    );
    let rec = records(&e, "t").await;
    assert_eq!(
        (rec[0].attempt, rec[0].attempts.len()),
        (1, 0),
        "one attempt, no failure"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stall_after_a_chunk_is_the_idle_timeout_and_is_not_hopped() {
    let (primary, backup) = (stalls_after_a_chunk("openai"), mock("ollama"));
    let chain = FallbackLlmAdapter::new(ports(&[&primary, &backup])).unwrap();
    let (e, g) = paladin_run(Arc::new(chain), first_chunk_and_idle(5, 10));

    let started = Instant::now();
    let outcome = e.start(&g, "t", json!({})).await.unwrap();
    assert_eq!(
        started.elapsed(),
        S(10),
        "cut one idle window after the chunk"
    );
    assert!(outcome.into_result().is_err());
    assert_eq!(
        backup.call_count(),
        0,
        "a partial answer is never completed elsewhere"
    );
    let rec = records(&e, "t").await;
    assert_eq!(rec[0].status, NodeStatus::Failed);
    assert_eq!(
        rec[0].attempts[0].error.source,
        NodeErrorSource::Timeout(TimeoutKind::Idle)
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_window_is_held_while_a_first_chunk_is_awaited() {
    // The first chunk comes after 4 s: past the 2 s idle window, inside the
    // 5 s first-chunk deadline. Then chunks every second.
    let slow_start = || {
        mock("openai").with_stream_steps(vec![
            MockStreamStep::Pause(S(4)),
            MockStreamStep::Item(Ok(LlmChunk::text("a"))),
            MockStreamStep::Pause(S(1)),
            MockStreamStep::Item(Ok(LlmChunk::text("b"))),
        ])
    };
    let (e, g) = paladin_run(Arc::new(slow_start()), first_chunk_and_idle(5, 2));
    let started = Instant::now();
    let state = run_to_state(&e, &g, "t", json!({})).await;
    assert_eq!(started.elapsed(), S(5));
    assert_eq!(state.get("answer"), Some(&json!("ab")));

    // Without a first-chunk deadline the idle window runs from the start,
    // as before: the same provider is cut at 2 s.
    let idle_only = TimeoutPolicy::idle(S(2));
    let (e, g) = paladin_run(Arc::new(slow_start()), idle_only);
    let started = Instant::now();
    assert!(
        e.start(&g, "t", json!({}))
            .await
            .unwrap()
            .into_result()
            .is_err()
    );
    assert_eq!(started.elapsed(), S(2));
}

#[tokio::test(start_paused = true)]
async fn a_single_silent_provider_fails_the_attempt_transiently_at_the_deadline() {
    let llm = silent("openai");
    let (e, g) = paladin_run(
        Arc::new(llm.clone()),
        TimeoutPolicy::default().with_first_chunk(S(3)),
    );
    let started = Instant::now();
    assert!(
        e.start(&g, "t", json!({}))
            .await
            .unwrap()
            .into_result()
            .is_err()
    );
    assert_eq!(started.elapsed(), S(3));
    let error = &records(&e, "t").await[0].attempts[0].error;
    assert_eq!(error.transience, Transience::Transient);
    assert!(
        error
            .source
            .to_string()
            .contains("openai sent no first chunk within 3s"),
        "{}",
        error.source
    );
}

#[tokio::test(start_paused = true)]
async fn a_providers_own_deadlines_win_and_apply_without_a_node_deadline() {
    let (a, b, c) = (silent("a"), silent("b"), mock("c").with_response("from c"));
    let chain = FallbackLlmAdapter::new(ports(&[&a, &b, &c]))
        .unwrap()
        .with_stream_deadlines(StreamDeadlines::none().with_first_chunk(S(2)))
        .with_provider_stream_deadlines(0, StreamDeadlines::none().with_first_chunk(S(1)))
        .unwrap();
    let request = LlmRequest::new("m", vec![LlmMessage::user("hi")]);

    // A caller's 30 s deadline yields to each provider's own: 1 s, then 2 s.
    let started = Instant::now();
    let chunks = chain
        .generate_stream_within(&request, Some(S(30)))
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(started.elapsed(), S(3));
    let chunk = chunks[0].as_ref().unwrap();
    assert_eq!(
        (
            chunk.content.as_str(),
            chunk.served_by(),
            chunk.chain_position()
        ),
        ("from c", Some("c"), Some(2))
    );

    // Plain `generate_stream` (no caller deadline) still gets them.
    let (a, b) = (silent("a"), mock("b").with_response("from b"));
    let chain = FallbackLlmAdapter::new(ports(&[&a, &b]))
        .unwrap()
        .with_stream_deadlines(StreamDeadlines::none().with_first_chunk(S(4)));
    let started = Instant::now();
    let mut stream = chain.generate_stream(&request).await.unwrap();
    assert_eq!(started.elapsed(), S(4));
    assert_eq!(stream.next().await.unwrap().unwrap().content, "from b");

    assert_eq!(
        FallbackLlmAdapter::new(ports(&[&a]))
            .unwrap()
            .with_provider_stream_deadlines(1, StreamDeadlines::none())
            .unwrap_err(),
        FallbackChainError::NoSuchProvider { index: 1, len: 1 }
    );
}

#[tokio::test(start_paused = true)]
async fn a_providers_idle_deadline_fails_a_stalled_stream_without_hopping() {
    let (a, b) = (stalls_after_a_chunk("a"), mock("b"));
    let chain = FallbackLlmAdapter::new(ports(&[&a, &b]))
        .unwrap()
        .with_provider_stream_deadlines(0, StreamDeadlines::none().with_idle(S(7)))
        .unwrap();
    let request = LlmRequest::new("m", vec![LlmMessage::user("hi")]);
    let started = Instant::now();
    let items = chain
        .generate_stream(&request)
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(started.elapsed(), S(7));
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap().content, "partial");
    let error = items[1].as_ref().unwrap_err();
    assert_eq!(error.transience(), Transience::Transient);
    assert_eq!(
        error,
        &LlmError::Timeout("a stalled for 7s after a chunk".into())
    );
    assert_eq!(b.call_count(), 0);
}

#[test]
fn a_zero_or_useless_first_chunk_deadline_is_refused_at_validation() {
    for (timeout, problem) in [
        (
            TimeoutPolicy::default().with_first_chunk(Duration::ZERO),
            "first_chunk is zero",
        ),
        (
            TimeoutPolicy::run(S(5)).with_first_chunk(S(5)),
            "first_chunk 5s is not shorter than run_timeout 5s",
        ),
    ] {
        let (_, g) = paladin_run(Arc::new(mock("a")), timeout);
        let errors = g.validate().unwrap_err();
        let text = format!("{errors:?}");
        assert!(text.contains("TimeoutPolicyInvalid"), "{text}");
        assert!(text.contains(problem), "{text}");
    }
}
