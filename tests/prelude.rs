//! `use aegis::prelude::*;` is the only import a typical program needs: this
//! file names nothing from `aegis` but the prelude. Also the readable
//! `Display` of trace events and closures as trace sinks.

use aegis::engine::CancellationToken;
use aegis::engine::EdgeConditionEvaluator;
use aegis::engine::ErrorHandler;
use aegis::engine::InterceptorDecision;
use aegis::engine::NodeInterceptor;
use aegis::engine::RetryPredicateError;
use aegis::engine::RetryPredicateEvaluator;
use aegis::error::LlmError;
use aegis::error::NodeErrorSource;
use aegis::error::PaladinError;
use aegis::error::StoreError;
use aegis::error::TimeoutKind;
use aegis::error::Transience;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::LlmResponse;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::state::StateError;
use aegis::trace::AttemptStatus;
use aegis::trace::CollectingTraceSink;
use aegis::trace::TraceEvent;
use aegis::trace::TraceSink;
use aegis::waypoint::Waypoint;
use aegis::waypoint::WaypointStatus;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Fails transiently once, then books; on final failure `cancel` runs.
#[aegis(retry(max = 3, initial = "10ms", jitter = false, on = "always"), on_error(route = cancel))]
async fn book(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    ctx.heartbeat();
    if ctx.attempt() == 1 {
        return Err(StateNodeError::transient("seat map returned 503"));
    }
    let who = state
        .get("traveller")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    let mut delta = StateDelta::new();
    delta.set("booking", format!("seat for {who}"))?;
    Ok(delta)
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("booking", "cancelled")?;
    Ok(delta)
}

struct Always;

#[async_trait]
impl RetryPredicateEvaluator for Always {
    async fn allows(&self, _: &NodeError, _: u32) -> Result<bool, RetryPredicateError> {
        Ok(true)
    }
}

struct Done;

#[async_trait]
impl EdgeConditionEvaluator for Done {
    async fn evaluate(&self, _: &Battlefield) -> Result<Vec<NodeId>, StateNodeError> {
        Ok(vec![NodeId::new(END)])
    }
}

/// Counts the attempts it lets through.
#[derive(Default)]
struct Counting(Mutex<u32>);

#[async_trait]
impl NodeInterceptor for Counting {
    async fn before(&self, _: &NodeId, _: &Battlefield) -> InterceptorDecision {
        if let Ok(mut n) = self.0.lock() {
            *n += 1;
        }
        InterceptorDecision::Continue
    }
}

struct Ignore;

#[async_trait]
impl ErrorHandler for Ignore {
    async fn handle(&self, _: &NodeError, _: &Battlefield) -> Result<Directive, NodeError> {
        Ok(StateDelta::new().into())
    }
}

/// Answers with a fixed text: the provider-neutral LLM boundary is in the
/// prelude, so a test double needs no adapter.
struct Canned;

#[async_trait]
impl LlmPort for Canned {
    async fn generate(&self, _: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Ok(LlmResponse::text("canned"))
    }

    fn get_provider_name(&self) -> &str {
        "canned"
    }
}

fn typical_graph() -> WarGraph {
    graph! {
        schema {
            traveller: LastWrite required,
            booking: LastWrite,
            book_error: LastWrite,
            summary: LastWrite,
        }
        nodes {
            book,
            cancel,
            summary = paladin(Paladin::new("Summariser").with_model("m"), "Summarise {booking}" -> summary),
        }
        default_aegis { timeout(run = "30s") }
        edges {
            START -> book -> summary;
            summary ?> "done" -> [END];
            cancel -> END;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_typical_program_needs_only_the_prelude() {
    let trace = CollectingTraceSink::new();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let printed = lines.clone();
    let counting = Arc::new(Counting::default());
    let token = CancellationToken::new();
    let engine: WarEngine<InMemoryWaypointStore> = WarEngine::in_memory()
        .with_llm(Canned)
        .with_retry_predicate("always", Arc::new(Always))
        .with_edge_evaluator("done", Arc::new(Done))
        .with_error_handler("ignore", Arc::new(Ignore))
        .with_interceptor(counting.clone())
        .with_trace_sink(trace.clone())
        .with_trace_sink(move |event: TraceEvent| {
            if let Ok(mut l) = printed.lock() {
                l.push(event.to_string());
            }
        })
        .with_cancellation(token.clone());

    let outcome: RunOutcome = engine
        .start(&typical_graph(), "trip-1", json!({ "traveller": "Ada" }))
        .await
        .unwrap();
    let state: Battlefield = outcome.into_result().unwrap();
    assert_eq!(state.get("booking"), Some(&json!("seat for Ada")));
    assert_eq!(state.get("summary"), Some(&json!("canned")));
    assert_eq!(*counting.0.lock().unwrap(), 3, "book twice, summary once");

    let waypoint: Option<Waypoint> = engine.store().latest("trip-1").await.unwrap();
    assert_eq!(waypoint.map(|w| w.status), Some(WaypointStatus::Completed));
    let events = trace.events();
    assert!(events.iter().any(|e| matches!(
        e,
        TraceEvent::RetryScheduled { delay, .. } if *delay == Duration::from_millis(10)
    )));
    // The closure saw the same events, as lines.
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), events.len());
    assert!(
        lines.contains(&"[trip-1] superstep 1: book retries, attempt 2 in 10ms".to_string()),
        "{lines:#?}"
    );
    assert!(!token.is_cancelled());
}

#[test]
fn errors_and_policies_are_in_the_prelude() {
    let aegis = Aegis::new()
        .with_retry(RetryPolicy::default())
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(1)))
        .with_on_error(ErrorHandlerSpec::Custom("ignore".into()))
        .with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Default,
        ));
    assert!(aegis.retry.is_some());
    let error: NodeError = NodeError::new(
        NodeId::new("book"),
        1,
        Transience::Transient,
        NodeErrorSource::Timeout(TimeoutKind::Run),
    );
    let engine_error: EngineError = EngineError::NodeFailed(error);
    assert!(engine_error.to_string().contains("book"));
    let _: Option<StoreError> = None;
    let _: Option<PaladinError> = None;
    let _: Option<StateError> = None;
}

fn event_lines() -> Vec<(TraceEvent, &'static str)> {
    let node = || NodeId::new("book");
    vec![
        (
            TraceEvent::RunStarted {
                thread_id: "t".into(),
                resumed: true,
            },
            "[t] run resumed",
        ),
        (
            TraceEvent::SuperstepStarted {
                thread_id: "t".into(),
                superstep: 2,
                vanguard: vec![node(), NodeId::new("cancel")],
            },
            "[t] superstep 2 runs book, cancel",
        ),
        (
            TraceEvent::NodeStarted {
                thread_id: "t".into(),
                superstep: 2,
                node_id: node(),
                task_key: Some("k1".into()),
                attempt: 1,
            },
            "[t] superstep 2: book[k1] attempt 1 started",
        ),
        (
            TraceEvent::NodeFinished {
                thread_id: "t".into(),
                superstep: 2,
                node_id: node(),
                task_key: None,
                attempt: 2,
                status: AttemptStatus::Failed(NodeError::new(
                    node(),
                    2,
                    Transience::Transient,
                    NodeErrorSource::Timeout(TimeoutKind::Run),
                )),
                cache_hit: false,
                duration: Duration::from_millis(3),
                cache_origin: None,
            },
            "[t] superstep 2: book attempt 2 failed after 3ms (transient): run timeout elapsed",
        ),
        (
            TraceEvent::NodeFinished {
                thread_id: "t".into(),
                superstep: 2,
                node_id: node(),
                task_key: None,
                attempt: 1,
                status: AttemptStatus::Succeeded,
                cache_hit: true,
                duration: Duration::from_micros(5),
                cache_origin: None,
            },
            "[t] superstep 2: book served from the cache in 5µs",
        ),
        (
            TraceEvent::NodeFinished {
                thread_id: "t".into(),
                superstep: 2,
                node_id: node(),
                task_key: None,
                attempt: 1,
                status: AttemptStatus::Skipped {
                    reason: "interceptor".into(),
                },
                cache_hit: false,
                duration: Duration::ZERO,
                cache_origin: None,
            },
            "[t] superstep 2: book attempt 1 skipped after 0ns: interceptor",
        ),
        (
            TraceEvent::RetryScheduled {
                thread_id: "t".into(),
                superstep: 2,
                node_id: node(),
                attempt: 3,
                delay: Duration::from_secs(1),
            },
            "[t] superstep 2: book retries, attempt 3 in 1s",
        ),
        (
            TraceEvent::FallbackHop {
                node_id: Some(node()),
                from_provider: "openai".into(),
                to_provider: "anthropic".into(),
            },
            "book: model fallback from openai to anthropic",
        ),
        (
            TraceEvent::SuperstepFinished {
                thread_id: "t".into(),
                superstep: 2,
                next: vec![],
            },
            "[t] superstep 2 done, next: (none)",
        ),
        (
            TraceEvent::RunFinished {
                thread_id: "t".into(),
                outcome: "Completed",
            },
            "[t] run finished: Completed",
        ),
    ]
}

#[test]
fn every_trace_event_prints_one_readable_line() {
    for (event, line) in event_lines() {
        assert_eq!(event.to_string(), line);
    }
}

#[test]
fn attempt_status_prints_its_outcome() {
    assert_eq!(AttemptStatus::Succeeded.to_string(), "succeeded");
    assert_eq!(
        AttemptStatus::Skipped {
            reason: "shutdown".into()
        }
        .to_string(),
        "skipped: shutdown"
    );
}

#[test]
fn a_closure_is_a_trace_sink() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    let sink: Arc<dyn TraceSink> = Arc::new(move |event: TraceEvent| {
        into.lock().unwrap().push(event);
    });
    let (event, _) = event_lines().remove(0);
    sink.emit(event.clone());
    assert_eq!(*seen.lock().unwrap(), vec![event]);
}
