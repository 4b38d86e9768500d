//! `PaladinExecutionService`: the completion → tool → armament loop,
//! heartbeats, served_by end to end through a Paladin node run by a
//! `WarEngine`, and idle timeouts on a streaming Paladin node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::{
    async_trait,
    engine::WarEngine,
    error::{LlmError, NodeErrorSource, PaladinError, TimeoutKind, Transience},
    graph::{EngineLimits, HeartbeatHandle, InputMapping, NodeSpec, WarGraph},
    id::{END, START},
    llm::{
        FallbackLlmAdapter, LlmChunk, LlmPort, LlmRole, LlmUsage, MockLlmAdapter, MockStreamStep,
        ToolCall,
    },
    paladin::{Armament, Paladin},
    paladin::{PaladinExecutionService, PaladinPort, PaladinResult},
    policy::{Aegis, TimeoutPolicy},
    state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec},
    trace::{CollectingTraceSink, TraceEvent},
    waypoint::InMemoryWaypointStore,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A tool that records its arguments and answers with a fixed value.
struct Lookup {
    seen: Mutex<Vec<Value>>,
    answer: Result<Value, PaladinError>,
}

impl Lookup {
    fn answering(answer: Value) -> Arc<Self> {
        Arc::new(Lookup {
            seen: Mutex::new(Vec::new()),
            answer: Ok(answer),
        })
    }
}

#[async_trait]
impl Armament for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "weather by city"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }
    async fn invoke(&self, arguments: Value) -> Result<Value, PaladinError> {
        self.seen.lock().unwrap().push(arguments);
        self.answer.clone()
    }
}

fn paladin() -> Paladin {
    Paladin::new("Writer")
        .with_model("test-model")
        .with_system_prompt("be brief")
        .with_temperature(0.25)
        .with_stop_word("END")
}

fn service(mock: &MockLlmAdapter) -> PaladinExecutionService {
    PaladinExecutionService::new(mock.clone())
}

#[tokio::test]
async fn loops_through_tool_calls_until_a_final_answer() {
    let lookup = Lookup::answering(json!({"forecast": "rain"}));
    let mock = MockLlmAdapter::new()
        .with_tool_calls(vec![ToolCall::new("c1", "lookup", json!({"city": "Oslo"}))])
        .with_stream(vec![
            Ok(LlmChunk::text("Bring ")),
            Ok(LlmChunk::text("an umbrella").with_usage(LlmUsage::new(10, 3))),
        ]);
    let p = paladin().with_max_loops(3).with_armament(lookup.clone());
    let result = service(&mock)
        .execute(&p, "Weather in Oslo?")
        .await
        .unwrap();
    assert_eq!(
        result,
        PaladinResult::new("Bring an umbrella")
            .with_loops(2)
            .with_usage(LlmUsage::new(10, 3))
            // A stream reports no model: the requested one.
            .with_model(Some("test-model"))
    );
    assert_eq!(*lookup.seen.lock().unwrap(), vec![json!({"city": "Oslo"})]);

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.model, "test-model");
    assert_eq!(first.temperature, Some(0.25));
    assert_eq!(first.stop, vec!["END".to_string()]);
    assert_eq!(first.tools.len(), 1);
    assert_eq!(first.tools[0].name, "lookup");
    assert_eq!(
        first
            .messages
            .iter()
            .map(|m| (m.role, m.content.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (LlmRole::System, "be brief"),
            (LlmRole::User, "Weather in Oslo?")
        ]
    );
    // The second round carries the model's tool call and the tool's result.
    let second = &requests[1].messages;
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].role, LlmRole::Assistant);
    assert_eq!(second[2].tool_calls[0].id, "c1");
    assert_eq!(second[3].role, LlmRole::Tool);
    assert_eq!(second[3].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(second[3].content, r#"{"forecast":"rain"}"#);
}

#[tokio::test]
async fn max_loops_bounds_the_tool_loop() {
    let call = || vec![ToolCall::new("c", "lookup", json!({}))];
    let mock = MockLlmAdapter::new()
        .with_tool_calls(call())
        .with_tool_calls(call())
        .with_response("never reached");
    let p = paladin()
        .with_max_loops(2)
        .with_armament(Lookup::answering(json!("ok")));
    let e = service(&mock).execute(&p, "go").await.unwrap_err();
    assert_eq!(e, PaladinError::MaxLoopsExceeded(2));
    assert_eq!(mock.call_count(), 2);
}

#[tokio::test]
async fn unknown_tools_and_failing_armaments_are_errors() {
    let mock =
        MockLlmAdapter::new().with_tool_calls(vec![ToolCall::new("c", "teleport", json!({}))]);
    let p = paladin()
        .with_max_loops(2)
        .with_armament(Lookup::answering(json!("ok")));
    let e = service(&mock).execute(&p, "go").await.unwrap_err();
    assert!(
        matches!(&e, PaladinError::ArmamentError { armament, .. } if armament == "teleport"),
        "{e:?}"
    );

    let failing = Arc::new(Lookup {
        seen: Mutex::new(Vec::new()),
        answer: Err(PaladinError::ArmamentError {
            armament: "lookup".into(),
            message: "service down".into(),
        }),
    });
    let mock = MockLlmAdapter::new().with_tool_calls(vec![ToolCall::new("c", "lookup", json!({}))]);
    let e = service(&mock)
        .execute(&paladin().with_max_loops(2).with_armament(failing), "go")
        .await
        .unwrap_err();
    assert_eq!(
        e,
        PaladinError::ArmamentError {
            armament: "lookup".into(),
            message: "service down".into()
        }
    );
}

#[tokio::test]
async fn misconfiguration_and_provider_errors_keep_their_classification() {
    let mock = MockLlmAdapter::new();
    let e = service(&mock)
        .execute(&Paladin::new("NoModel"), "x")
        .await
        .unwrap_err();
    assert!(matches!(e, PaladinError::ConfigurationError(_)));
    assert_eq!(e.transience(), Transience::Permanent);
    let e = service(&mock)
        .execute(&paladin().with_max_loops(0), "x")
        .await
        .unwrap_err();
    assert!(matches!(e, PaladinError::ConfigurationError(_)));
    assert_eq!(mock.call_count(), 0);

    let mock = MockLlmAdapter::new().with_error(LlmError::RateLimited { retry_after: None });
    let e = service(&mock).execute(&paladin(), "x").await.unwrap_err();
    assert_eq!(
        e,
        PaladinError::Llm(LlmError::RateLimited { retry_after: None })
    );
    assert_eq!(e.transience(), Transience::Transient);

    // A stream failing midway fails the execution with that error.
    let mid = LlmError::NetworkError("reset".into());
    let mock = MockLlmAdapter::new().with_stream(vec![Ok(LlmChunk::text("a")), Err(mid.clone())]);
    let e = service(&mock).execute(&paladin(), "x").await.unwrap_err();
    assert_eq!(e, PaladinError::Llm(mid));
}

#[tokio::test]
async fn beats_after_every_chunk_completion_and_armament_call() {
    let mock = MockLlmAdapter::new()
        .with_stream(vec![
            Ok(LlmChunk::default()),
            Ok(LlmChunk::default().with_tool_calls(vec![
                ToolCall::new("c1", "lookup", json!({"city": "A"})),
                ToolCall::new("c2", "lookup", json!({"city": "B"})),
            ])),
        ])
        .with_stream(vec![
            Ok(LlmChunk::text("x")),
            Ok(LlmChunk::text("y")),
            Ok(LlmChunk::text("z")),
        ]);
    let p = paladin()
        .with_max_loops(2)
        .with_armament(Lookup::answering(json!("ok")));
    let heartbeat = HeartbeatHandle::tracking();
    let r = service(&mock)
        .execute_observed(&p, "go", &heartbeat)
        .await
        .unwrap();
    assert_eq!(r.output, "xyz");
    // Round 1: 2 chunks + 1 completion + 2 armament calls; round 2: 3 chunks
    // + 1 completion.
    assert_eq!(heartbeat.beats(), 5 + 4);

    // Without streaming, one beat per completion.
    let mock =
        MockLlmAdapter::new().with_stream(vec![Ok(LlmChunk::text("a")), Ok(LlmChunk::text("b"))]);
    let heartbeat = HeartbeatHandle::tracking();
    let r = service(&mock)
        .with_streaming(false)
        .execute_observed(&paladin(), "go", &heartbeat)
        .await
        .unwrap();
    assert_eq!(r.output, "ab");
    assert_eq!(heartbeat.beats(), 1);
}

#[tokio::test]
async fn served_by_is_none_without_a_chain_and_set_with_one() {
    let plain = MockLlmAdapter::new().with_response("hi");
    let r = service(&plain).execute(&paladin(), "x").await.unwrap();
    assert_eq!(r.served_by, None);

    for streaming in [true, false] {
        let a = MockLlmAdapter::new()
            .with_provider_name("a")
            .with_error(LlmError::Timeout("slow".into()));
        let b = MockLlmAdapter::new()
            .with_provider_name("b")
            .with_response("from b");
        let chain = FallbackLlmAdapter::new(vec![Arc::new(a), Arc::new(b)]).unwrap();
        let r = PaladinExecutionService::new(chain)
            .with_streaming(streaming)
            .execute(&paladin(), "x")
            .await
            .unwrap();
        assert_eq!(r.served_by.as_deref(), Some("b"));
        assert_eq!(r.output, "from b");
    }
}

/// Records what the wrapped port returned, so a test can see `served_by`
/// come out of a node the engine ran.
struct Recording {
    inner: PaladinExecutionService,
    results: Mutex<Vec<PaladinResult>>,
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
        let r = self
            .inner
            .execute_observed(paladin, input, heartbeat)
            .await?;
        self.results.lock().unwrap().push(r.clone());
        Ok(r)
    }
}

fn graph(aegis: Option<Aegis>) -> WarGraph {
    let question = FieldName::new("question").unwrap();
    let answer = FieldName::new("answer").unwrap();
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(question, DispatchRule::LastWrite, None, true),
        FieldSpec::new(answer.clone(), DispatchRule::LastWrite, None, false),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "writer",
        NodeSpec::paladin(paladin(), InputMapping::new("Answer: {question}"), answer),
    );
    g.add_edge(START, "writer").add_edge("writer", END);
    if let Some(a) = aegis {
        g.set_aegis("writer", a);
    }
    g
}

fn engine(port: Arc<dyn PaladinPort>) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port)
}

#[tokio::test]
async fn served_by_travels_end_to_end_through_a_paladin_node() {
    let openai = MockLlmAdapter::new()
        .with_provider_name("openai")
        .with_error(LlmError::ProviderError {
            provider: "openai".into(),
            status: 503,
            message: "overloaded".into(),
            retry_after: None,
        });
    let anthropic = MockLlmAdapter::new()
        .with_provider_name("anthropic")
        .with_error(LlmError::RateLimited { retry_after: None });
    let ollama = MockLlmAdapter::new()
        .with_provider_name("ollama")
        .with_stream(vec![
            Ok(LlmChunk::text("forty")),
            Ok(LlmChunk::text("-two")),
        ]);
    let hops = CollectingTraceSink::new();
    let chain = FallbackLlmAdapter::new(vec![
        Arc::new(openai.clone()),
        Arc::new(anthropic.clone()),
        Arc::new(ollama.clone()),
    ])
    .unwrap()
    .with_trace_sink(hops.clone());
    let port = Arc::new(Recording {
        inner: PaladinExecutionService::new(chain),
        results: Mutex::new(Vec::new()),
    });
    let outcome = engine(port.clone())
        .start(&graph(None), "t1", json!({"question": "life?"}))
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(outcome.state().get("answer"), Some(&json!("forty-two")));
    let results = port.results.lock().unwrap().clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].served_by.as_deref(), Some("ollama"));
    // The rendered input reached the provider.
    assert_eq!(ollama.requests()[0].messages[1].content, "Answer: life?");
    assert_eq!(
        hops.events()
            .iter()
            .map(|e| match e {
                TraceEvent::FallbackHop {
                    from_provider,
                    to_provider,
                    ..
                } => format!("{from_provider}->{to_provider}"),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>(),
        vec!["openai->anthropic", "anthropic->ollama"]
    );
}

#[tokio::test]
async fn provider_failures_become_structured_node_errors() {
    let a = MockLlmAdapter::new()
        .with_provider_name("a")
        .with_error(LlmError::ProviderError {
            provider: "a".into(),
            status: 503,
            message: "overloaded".into(),
            retry_after: None,
        });
    let b = MockLlmAdapter::new()
        .with_provider_name("b")
        .with_error(LlmError::ProviderError {
            provider: "b".into(),
            status: 502,
            message: "bad gateway".into(),
            retry_after: None,
        });
    let chain = FallbackLlmAdapter::new(vec![Arc::new(a), Arc::new(b)]).unwrap();
    let outcome = engine(Arc::new(PaladinExecutionService::new(chain)))
        .start(&graph(None), "t", json!({"question": "q"}))
        .await
        .unwrap();
    let e = outcome.node_error().unwrap();
    assert_eq!(e.transience, Transience::Transient);
    match &e.source {
        NodeErrorSource::Llm {
            status,
            provider,
            kind,
            ..
        } => {
            assert_eq!(*status, Some(502));
            assert_eq!(provider.as_deref(), Some("b"));
            assert_eq!(kind, "AllProvidersFailed");
        }
        other => panic!("{other:?}"),
    }

    let a = MockLlmAdapter::new().with_error(LlmError::AuthenticationError("bad key".into()));
    let outcome = engine(Arc::new(service(&a)))
        .start(&graph(None), "t", json!({"question": "q"}))
        .await
        .unwrap();
    let e = outcome.node_error().unwrap();
    assert_eq!(e.transience, Transience::Permanent);
    assert!(
        matches!(&e.source, NodeErrorSource::Llm { status: Some(401), kind, .. } if kind == "AuthenticationError")
    );
}

fn idle_aegis(idle: Duration) -> Aegis {
    Aegis::new().with_timeout(TimeoutPolicy::idle(idle))
}

fn chunks(n: usize) -> Vec<Result<LlmChunk, LlmError>> {
    (0..n)
        .map(|i| Ok(LlmChunk::text(format!("{i},"))))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_does_not_cut_a_steadily_streaming_node() {
    // 30 chunks, one every 100 ms: 3 s of streaming under a 1 s idle window.
    let mock = MockLlmAdapter::new().with_stream_every(Duration::from_millis(100), chunks(30));
    let start = Instant::now();
    let outcome = engine(Arc::new(service(&mock)))
        .start(
            &graph(Some(idle_aegis(Duration::from_secs(1)))),
            "t",
            json!({"question": "q"}),
        )
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let want: String = (0..30).map(|i| format!("{i},")).collect();
    assert_eq!(outcome.state().get("answer"), Some(&json!(want)));
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_fires_when_the_stream_stalls() {
    let mut steps: Vec<MockStreamStep> = Vec::new();
    for c in chunks(3) {
        steps.push(MockStreamStep::Pause(Duration::from_millis(100)));
        steps.push(MockStreamStep::Item(c));
    }
    steps.push(MockStreamStep::Stall);
    let mock = MockLlmAdapter::new().with_stream_steps(steps);
    let start = Instant::now();
    let outcome = engine(Arc::new(service(&mock)))
        .start(
            &graph(Some(idle_aegis(Duration::from_secs(1)))),
            "t",
            json!({"question": "q"}),
        )
        .await
        .unwrap();
    let e = outcome.node_error().unwrap();
    assert_eq!(e.source, NodeErrorSource::Timeout(TimeoutKind::Idle));
    assert_eq!(e.transience, Transience::Transient);
    // Cut exactly one idle window after the last chunk.
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300) + Duration::from_secs(1)
    );
}

#[tokio::test(start_paused = true)]
async fn without_streaming_the_same_node_is_cut_because_no_chunk_beats() {
    let mock = MockLlmAdapter::new().with_stream_every(Duration::from_millis(100), chunks(30));
    let outcome = engine(Arc::new(service(&mock).with_streaming(false)))
        .start(
            &graph(Some(idle_aegis(Duration::from_secs(1)))),
            "t",
            json!({"question": "q"}),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome.node_error().unwrap().source,
        NodeErrorSource::Timeout(TimeoutKind::Idle)
    );
}

#[tokio::test]
async fn llm_port_is_object_safe_and_defaults_streaming_to_one_chunk() {
    struct Fixed;
    #[async_trait]
    impl LlmPort for Fixed {
        async fn generate(
            &self,
            _: &aegis::llm::LlmRequest,
        ) -> Result<aegis::llm::LlmResponse, LlmError> {
            Ok(aegis::llm::LlmResponse::text("whole"))
        }
        fn get_provider_name(&self) -> &str {
            "fixed"
        }
    }
    let port: Arc<dyn LlmPort> = Arc::new(Fixed);
    let heartbeat = HeartbeatHandle::tracking();
    let r = PaladinExecutionService::new(port)
        .execute_observed(&paladin(), "x", &heartbeat)
        .await
        .unwrap();
    assert_eq!(r.output, "whole");
    assert_eq!(heartbeat.beats(), 2);
}
