//! The model fallback chain: hop rules, AllProvidersFailed, statelessness,
//! the first-chunk rule, FallbackHop events, served_by, and a circuit
//! breaker inside a chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::{
    error::{LlmError, ProviderAttempt, Transience},
    llm::{
        CircuitBreaker, CircuitBreakerConfig, CircuitState, FallbackChainError, FallbackLlmAdapter,
        LlmChunk, LlmMessage, LlmPort, LlmRequest, LlmResponse, MockLlmAdapter, SERVED_BY_KEY,
    },
    trace::{CollectingTraceSink, TraceEvent},
};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn request() -> LlmRequest {
    LlmRequest::new("m", vec![LlmMessage::user("hi")])
}

fn mock(name: &str) -> MockLlmAdapter {
    MockLlmAdapter::new().with_provider_name(name)
}

fn chain(ports: &[&MockLlmAdapter]) -> FallbackLlmAdapter {
    FallbackLlmAdapter::new(
        ports
            .iter()
            .map(|m| Arc::new((*m).clone()) as Arc<dyn LlmPort>)
            .collect(),
    )
    .unwrap()
}

fn overloaded(provider: &str) -> LlmError {
    LlmError::ProviderError {
        provider: provider.into(),
        status: 503,
        message: "overloaded".into(),
        retry_after: None,
    }
}

/// One error of each transience, and more than one shape of each.
fn errors_by_transience() -> Vec<(LlmError, Transience)> {
    vec![
        (overloaded("a"), Transience::Transient),
        (
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
            },
            Transience::Transient,
        ),
        (
            LlmError::NetworkError("reset".into()),
            Transience::Transient,
        ),
        (LlmError::Timeout("slow".into()), Transience::Transient),
        (
            LlmError::CircuitOpen {
                provider: "a".into(),
                retry_after: None,
            },
            Transience::Transient,
        ),
        (LlmError::ParseError("garbled".into()), Transience::Unknown),
        (
            LlmError::ProviderError {
                provider: "a".into(),
                status: 200,
                message: "failed 2xx".into(),
                retry_after: None,
            },
            Transience::Unknown,
        ),
        (
            LlmError::AuthenticationError("bad key".into()),
            Transience::Permanent,
        ),
        (
            LlmError::InvalidRequest("bad".into()),
            Transience::Permanent,
        ),
        (
            LlmError::ContextLengthExceeded("long".into()),
            Transience::Permanent,
        ),
        (
            LlmError::ContentFiltered("no".into()),
            Transience::Permanent,
        ),
        (
            LlmError::ProviderError {
                provider: "a".into(),
                status: 404,
                message: "no model".into(),
                retry_after: None,
            },
            Transience::Permanent,
        ),
    ]
}

#[tokio::test]
async fn hops_on_transient_and_unknown_and_stops_on_permanent() {
    for (error, transience) in errors_by_transience() {
        assert_eq!(error.transience(), transience, "{error:?}");
        let a = mock("a").with_error(error.clone());
        let b = mock("b").with_response("from b");
        let sink = CollectingTraceSink::new();
        let chain = chain(&[&a, &b]).with_trace_sink(sink.clone());
        let result = chain.generate(&request()).await;
        match transience {
            Transience::Permanent => {
                // Short-circuited, returned unchanged, never re-sent.
                assert_eq!(result.unwrap_err(), error);
                assert_eq!(b.call_count(), 0);
                assert!(sink.events().is_empty());
            }
            _ => {
                let r = result.unwrap();
                assert_eq!(r.content, "from b", "{error:?}");
                assert_eq!(r.served_by(), Some("b"));
                assert_eq!(b.call_count(), 1);
                assert_eq!(sink.events().len(), 1);
            }
        }
        assert_eq!(a.call_count(), 1);
    }
}

#[tokio::test]
async fn the_same_rules_hold_for_streams() {
    for (error, transience) in errors_by_transience() {
        // Once as a failed call, once as an error first item.
        for as_first_item in [false, true] {
            let a = if as_first_item {
                mock("a").with_stream(vec![Err(error.clone())])
            } else {
                mock("a").with_error(error.clone())
            };
            let b = mock("b").with_stream(vec![Ok(LlmChunk::text("b1")), Ok(LlmChunk::text("b2"))]);
            let result = chain(&[&a, &b]).generate_stream(&request()).await;
            match transience {
                Transience::Permanent => {
                    assert_eq!(result.err().unwrap(), error);
                    assert_eq!(b.call_count(), 0);
                }
                _ => {
                    let chunks = result.ok().unwrap().collect::<Vec<_>>().await;
                    let text: String = chunks
                        .iter()
                        .map(|c| c.as_ref().unwrap().content.clone())
                        .collect();
                    assert_eq!(text, "b1b2");
                }
            }
        }
    }
}

#[tokio::test]
async fn every_call_starts_at_element_zero() {
    let a = mock("a")
        .with_error(overloaded("a"))
        .with_response("a answers");
    let b = mock("b").with_response("b answers");
    let chain = chain(&[&a, &b]);
    assert_eq!(
        chain.generate(&request()).await.unwrap().served_by(),
        Some("b")
    );
    // The hop above left nothing behind: the next call tries `a` first.
    assert_eq!(
        chain.generate(&request()).await.unwrap().served_by(),
        Some("a")
    );
    assert_eq!((a.call_count(), b.call_count()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_are_independent() {
    // Call 1 takes `a`'s first outcome (a 503 after 50 ms) and hops; call 2,
    // started while call 1 is still waiting on `a`, takes `a`'s second
    // outcome and is served by `a`. Neither call's hop moves the other.
    let a = mock("a")
        .with_delay(Duration::from_millis(50))
        .with_error(overloaded("a"))
        .with_delay(Duration::from_millis(100))
        .with_response("a answers")
        .with_response("a again");
    let b = mock("b")
        .with_delay(Duration::from_millis(10))
        .with_response("b answers");
    let chain = Arc::new(chain(&[&a, &b]));
    let req = request();
    let (one, two) = tokio::join!(chain.generate(&req), chain.generate(&req));
    assert_eq!(one.unwrap().served_by(), Some("b"));
    assert_eq!(two.unwrap().served_by(), Some("a"));
    let three = chain.generate(&req).await.unwrap();
    assert_eq!(
        (three.content.as_str(), three.served_by()),
        ("a again", Some("a"))
    );
    assert_eq!((a.call_count(), b.call_count()), (3, 1));
}

#[tokio::test]
async fn all_providers_failed_lists_each_attempt_and_takes_the_last_transience() {
    let a = mock("openai").with_error(overloaded("openai"));
    let b = mock("anthropic").with_error(LlmError::RateLimited { retry_after: None });
    let c = mock("ollama").with_error(LlmError::NetworkError("refused".into()));
    let e = chain(&[&a, &b, &c]).generate(&request()).await.unwrap_err();
    let LlmError::AllProvidersFailed { attempts, last } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        attempts,
        &vec![
            ProviderAttempt::new(
                "openai",
                overloaded("openai").to_string(),
                Transience::Transient
            ),
            ProviderAttempt::new("anthropic", "rate limited", Transience::Transient),
            ProviderAttempt::new("ollama", "network error: refused", Transience::Transient),
        ]
    );
    assert_eq!(**last, LlmError::NetworkError("refused".into()));
    assert_eq!(e.transience(), Transience::Transient);

    // The chain's transience is exactly the last attempt's, even when an
    // earlier one was Transient.
    let a = mock("a").with_error(overloaded("a"));
    let b = mock("b").with_error(LlmError::ParseError("garbled".into()));
    let e = chain(&[&a, &b]).generate(&request()).await.unwrap_err();
    assert_eq!(e.transience(), Transience::Unknown);
    assert_eq!(e.status(), None);

    let a = mock("a").with_error(LlmError::ParseError("garbled".into()));
    let b = mock("b").with_error(overloaded("b"));
    let e = chain(&[&a, &b]).generate(&request()).await.unwrap_err();
    assert_eq!(e.transience(), Transience::Transient);
    assert_eq!((e.status(), e.provider()), (Some(503), Some("b")));

    // A single-element chain that fails is still the chain's error.
    let a = mock("a").with_error(overloaded("a"));
    let e = chain(&[&a]).generate(&request()).await.unwrap_err();
    assert!(matches!(&e, LlmError::AllProvidersFailed { attempts, .. } if attempts.len() == 1));
}

#[tokio::test]
async fn a_permanent_error_after_a_hop_short_circuits_the_rest() {
    let a = mock("a").with_error(overloaded("a"));
    let b = mock("b").with_error(LlmError::AuthenticationError("bad key".into()));
    let c = mock("c").with_response("never");
    let e = chain(&[&a, &b, &c]).generate(&request()).await.unwrap_err();
    assert_eq!(e, LlmError::AuthenticationError("bad key".into()));
    assert_eq!(c.call_count(), 0);
}

#[tokio::test]
async fn attempt_summaries_are_redacted() {
    let secret = "sk-live-0123456789abcdefghijklmnop";
    let a = mock("a").with_error(LlmError::NetworkError(format!("proxy said {secret}")));
    let b = mock("b").with_error(overloaded("b"));
    let e = chain(&[&a, &b]).generate(&request()).await.unwrap_err();
    let LlmError::AllProvidersFailed { attempts, .. } = e else {
        panic!()
    };
    assert!(!attempts[0].error.contains("0123456789abcdef"));
    assert!(attempts[0].error.contains("[REDACTED]"));
}

#[tokio::test]
async fn hops_emit_fallback_hop_events_in_order() {
    let a = mock("openai").with_error(overloaded("openai"));
    let b = mock("anthropic").with_error(LlmError::Timeout("slow".into()));
    let c = mock("ollama").with_response("ok");
    let sink = CollectingTraceSink::new();
    let chain = chain(&[&a, &b, &c]).with_trace_sink(sink.clone());
    chain.generate(&request()).await.unwrap();
    assert_eq!(
        sink.events(),
        vec![
            TraceEvent::FallbackHop {
                node_id: None,
                from_provider: "openai".into(),
                to_provider: "anthropic".into()
            },
            TraceEvent::FallbackHop {
                node_id: None,
                from_provider: "anthropic".into(),
                to_provider: "ollama".into()
            },
        ]
    );
    // No hop, no event; the last element failing is no hop either.
    sink.clear();
    let a = mock("a").with_response("ok");
    let b = mock("b");
    let chain = self::chain(&[&a, &b]).with_trace_sink(sink.clone());
    chain.generate(&request()).await.unwrap();
    assert!(sink.events().is_empty());
    let a = mock("a").with_error(overloaded("a"));
    let b = mock("b").with_error(overloaded("b"));
    let chain = self::chain(&[&a, &b]).with_trace_sink(sink.clone());
    chain.generate(&request()).await.unwrap_err();
    assert_eq!(sink.events().len(), 1);
}

#[tokio::test]
async fn first_chunk_error_falls_through_and_a_good_first_chunk_is_delivered() {
    let a = mock("a").with_stream(vec![Err(overloaded("a")), Ok(LlmChunk::text("never"))]);
    let b = mock("b").with_stream(vec![
        Ok(LlmChunk::text("first")),
        Ok(LlmChunk::text(" second")),
    ]);
    let sink = CollectingTraceSink::new();
    let chain = chain(&[&a, &b]).with_trace_sink(sink.clone());
    let items = chain
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    let chunks: Vec<LlmChunk> = items.into_iter().map(Result::unwrap).collect();
    // The peeked first chunk is still delivered, and every chunk is stamped.
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].content, "first");
    assert_eq!(chunks[1].content, " second");
    assert!(chunks.iter().all(|c| c.served_by() == Some("b")));
    assert_eq!(sink.events().len(), 1);
}

#[tokio::test]
async fn an_error_after_a_delivered_chunk_propagates_unchanged() {
    let mid = LlmError::NetworkError("connection reset".into());
    let a = mock("a").with_stream(vec![
        Ok(LlmChunk::text("partial")),
        Err(mid.clone()),
        Ok(LlmChunk::text("never")),
    ]);
    let b = mock("b").with_response("never");
    let sink = CollectingTraceSink::new();
    let chain = chain(&[&a, &b]).with_trace_sink(sink.clone());
    let items = chain
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap().content, "partial");
    assert_eq!(items[0].as_ref().unwrap().served_by(), Some("a"));
    assert_eq!(items[1].as_ref().unwrap_err(), &mid);
    assert_eq!(b.call_count(), 0);
    assert!(sink.events().is_empty());
}

#[tokio::test]
async fn every_stream_element_failing_is_all_providers_failed() {
    let a = mock("a").with_stream(vec![Err(overloaded("a"))]);
    let b = mock("b").with_error(LlmError::ParseError("bad".into()));
    let e = chain(&[&a, &b])
        .generate_stream(&request())
        .await
        .err()
        .unwrap();
    let LlmError::AllProvidersFailed { attempts, last } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(attempts.len(), 2);
    assert_eq!(**last, LlmError::ParseError("bad".into()));
    assert_eq!(e.transience(), Transience::Unknown);
}

#[tokio::test]
async fn served_by_names_the_innermost_provider() {
    let inner_a = mock("inner-a").with_error(overloaded("inner-a"));
    let inner_b = mock("inner-b").with_response("deep");
    let inner: Arc<dyn LlmPort> = Arc::new(chain(&[&inner_a, &inner_b]));
    let outer = FallbackLlmAdapter::new(vec![inner]).unwrap();
    let r = outer.generate(&request()).await.unwrap();
    assert_eq!(r.metadata[SERVED_BY_KEY], json!("inner-b"));

    // A plain port stamps nothing.
    let plain = mock("plain").with_response("x");
    assert_eq!(plain.generate(&request()).await.unwrap().served_by(), None);
}

#[test]
fn an_empty_chain_is_refused() {
    assert_eq!(
        FallbackLlmAdapter::new(vec![]).unwrap_err(),
        FallbackChainError::EmptyChain
    );
    let chain = chain(&[&mock("a"), &mock("b")]);
    assert_eq!(chain.get_provider_name(), "fallback");
    assert_eq!(chain.provider_names(), vec!["a", "b"]);
}

/// A breaker set up through the builder methods (the config-struct path is
/// `a_breaker_is_configured_alike_by_struct_or_builder`).
fn breaker(inner: &MockLlmAdapter, threshold: u32, cool_down: Duration) -> CircuitBreaker {
    CircuitBreaker::new(inner.clone())
        .with_failure_threshold(threshold)
        .with_cool_down(cool_down)
}

#[test]
fn a_breaker_is_configured_alike_by_struct_or_builder() {
    let inner = mock("p");
    for (threshold, cool_down) in [
        (0, Duration::ZERO),
        (3, Duration::from_secs(9)),
        (7, Duration::MAX),
    ] {
        let by_struct = CircuitBreaker::with_config(
            Arc::new(inner.clone()),
            CircuitBreakerConfig::default()
                .with_failure_threshold(threshold)
                .with_cool_down(cool_down),
        );
        let by_builder = breaker(&inner, threshold, cool_down);
        assert_eq!(by_struct.config(), by_builder.config());
        assert_eq!(by_builder.config().failure_threshold, threshold.max(1));
        assert_eq!(by_builder.config().cool_down, cool_down);
    }
    assert_eq!(
        CircuitBreaker::new(inner).config(),
        CircuitBreakerConfig::default()
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_after_consecutive_failures_and_probes_after_cool_down() {
    let inner = mock("flaky")
        .with_error(overloaded("flaky"))
        .with_error(LlmError::NetworkError("x".into()))
        .with_error(overloaded("flaky"))
        .with_response("recovered");
    let cb = breaker(&inner, 2, Duration::from_secs(30));
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(cb.state(), CircuitState::Closed { failures: 1 });
    cb.generate(&request()).await.unwrap_err();
    assert!(matches!(cb.state(), CircuitState::Open { .. }));

    // Open: refused without calling the provider, as a Transient error.
    let e = cb.generate(&request()).await.unwrap_err();
    assert_eq!(
        e,
        LlmError::CircuitOpen {
            provider: "flaky".into(),
            retry_after: Some(Duration::from_secs(30)),
        }
    );
    assert_eq!(e.transience(), Transience::Transient);
    assert_eq!(inner.call_count(), 2);

    // One instant before the cool-down ends it is still open.
    tokio::time::advance(Duration::from_secs(30) - Duration::from_millis(1)).await;
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(inner.call_count(), 2);

    // The probe fails: open for another cool-down.
    tokio::time::advance(Duration::from_millis(1)).await;
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(inner.call_count(), 3);
    assert!(matches!(cb.state(), CircuitState::Open { .. }));
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(inner.call_count(), 3);

    // The next probe succeeds: closed.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(cb.generate(&request()).await.unwrap().content, "recovered");
    assert_eq!(cb.state(), CircuitState::Closed { failures: 0 });
}

#[tokio::test]
async fn permanent_errors_do_not_trip_a_breaker_and_success_resets_it() {
    let inner = mock("p")
        .with_error(LlmError::InvalidRequest("bad".into()))
        .with_error(LlmError::InvalidRequest("bad".into()))
        .with_error(overloaded("p"))
        .with_response("ok")
        .with_error(overloaded("p"));
    let cb = breaker(&inner, 2, Duration::from_secs(30));
    for _ in 0..2 {
        cb.generate(&request()).await.unwrap_err();
    }
    assert_eq!(cb.state(), CircuitState::Closed { failures: 0 });
    cb.generate(&request()).await.unwrap_err();
    cb.generate(&request()).await.unwrap();
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(cb.state(), CircuitState::Closed { failures: 1 });
}

#[tokio::test(start_paused = true)]
async fn an_all_open_chain_carries_the_soonest_reopening_as_its_retry_hint() {
    let a = mock("a").with_error(overloaded("a"));
    let b = mock("b").with_error(overloaded("b"));
    let ca = breaker(&a, 1, Duration::from_secs(40));
    let cb = breaker(&b, 1, Duration::from_secs(30));
    ca.generate(&request()).await.unwrap_err();
    cb.generate(&request()).await.unwrap_err();
    tokio::time::advance(Duration::from_secs(5)).await;
    // Each refusal says how long its cool-down has left, typed.
    let e = ca.generate(&request()).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(35)));
    let chain = FallbackLlmAdapter::new(vec![Arc::new(ca), Arc::new(cb)]).unwrap();
    let e = chain.generate(&request()).await.unwrap_err();
    assert!(matches!(e, LlmError::AllProvidersFailed { .. }), "{e:?}");
    // Never waited on: the chain failed at once, hinting the soonest probe.
    assert_eq!(e.retry_after(), Some(Duration::from_secs(25)));
    assert_eq!((a.call_count(), b.call_count()), (1, 1));

    // An element that failed without a hint may answer at once: no hint.
    let c = mock("c").with_error(overloaded("c"));
    let cc: Arc<dyn LlmPort> = Arc::new(breaker(&c, 1, Duration::from_secs(30)));
    cc.generate(&request()).await.unwrap_err();
    let d: Arc<dyn LlmPort> = Arc::new(mock("d").with_error(overloaded("d")));
    let e = FallbackLlmAdapter::new(vec![cc, d])
        .unwrap()
        .generate(&request())
        .await
        .unwrap_err();
    assert_eq!(e.retry_after(), None);
}

#[tokio::test]
async fn a_chain_hops_past_an_open_breaker() {
    let primary = mock("primary").with_error(overloaded("primary"));
    let backup = mock("backup").with_response("one").with_response("two");
    let cb: Arc<dyn LlmPort> = Arc::new(breaker(&primary, 1, Duration::from_secs(60)));
    let sink = CollectingTraceSink::new();
    let chain = FallbackLlmAdapter::new(vec![cb, Arc::new(backup.clone())])
        .unwrap()
        .with_trace_sink(sink.clone());
    assert_eq!(chain.generate(&request()).await.unwrap().content, "one");
    // Now open: the chain hops without the primary being called again.
    assert_eq!(chain.generate(&request()).await.unwrap().content, "two");
    assert_eq!(primary.call_count(), 1);
    assert_eq!(sink.events().len(), 2);
    assert!(sink.events().iter().all(|e| matches!(
        e,
        TraceEvent::FallbackHop { from_provider, .. } if from_provider == "primary"
    )));
}

#[tokio::test]
async fn a_breaker_judges_a_stream_by_its_first_item() {
    let inner = mock("s")
        .with_stream(vec![Err(overloaded("s"))])
        .with_stream(vec![Ok(LlmChunk::text("a")), Err(overloaded("s"))]);
    let cb = breaker(&inner, 1, Duration::from_secs(60));
    let items = cb
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert!(items[0].is_err());
    assert!(matches!(cb.state(), CircuitState::Open { .. }));

    let inner = mock("s").with_stream(vec![Ok(LlmChunk::text("a")), Err(overloaded("s"))]);
    let cb = breaker(&inner, 1, Duration::from_secs(60));
    let items = cb
        .generate_stream(&request())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(items.len(), 2);
    assert_eq!(cb.state(), CircuitState::Closed { failures: 0 });
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_does_not_wedge_the_breaker() {
    let inner = mock("slow")
        .with_error(overloaded("slow"))
        .with_delay(Duration::from_secs(100))
        .with_response("late")
        .with_response("ok");
    let cb = breaker(&inner, 1, Duration::from_secs(10));
    cb.generate(&request()).await.unwrap_err();
    tokio::time::advance(Duration::from_secs(10)).await;
    // The probe is abandoned mid-call (as an Aegis timeout would drop it).
    let probe = tokio::time::timeout(Duration::from_secs(1), cb.generate(&request())).await;
    assert!(probe.is_err());
    assert_ne!(cb.state(), CircuitState::HalfOpen);
    assert_eq!(cb.generate(&request()).await.unwrap().content, "ok");
}

#[tokio::test]
async fn mock_scripts_run_in_order_then_fall_back_to_the_default() {
    let m = mock("m")
        .with_llm_response(LlmResponse::text("scripted").with_model("fixed"))
        .with_default_response("default");
    assert_eq!(m.remaining(), 1);
    let r = m.generate(&request()).await.unwrap();
    assert_eq!(
        (r.content.as_str(), r.model.as_str()),
        ("scripted", "fixed")
    );
    let r = m.generate(&request()).await.unwrap();
    assert_eq!((r.content.as_str(), r.model.as_str()), ("default", "m"));
    assert_eq!(m.remaining(), 0);
    assert_eq!(m.call_count(), 2);
    assert_eq!(m.requests().len(), 2);
    // A scripted stream consumed by `generate` folds into one response; its
    // error fails the call.
    let m = mock("m")
        .with_stream(vec![Ok(LlmChunk::text("a")), Ok(LlmChunk::text("b"))])
        .with_stream(vec![Ok(LlmChunk::text("a")), Err(overloaded("m"))]);
    assert_eq!(m.generate(&request()).await.unwrap().content, "ab");
    assert_eq!(m.generate(&request()).await.unwrap_err(), overloaded("m"));
}

#[tokio::test(start_paused = true)]
async fn mock_delays_and_paced_streams_run_on_the_paused_clock() {
    let m = mock("m")
        .with_delay(Duration::from_secs(5))
        .with_response("late")
        .with_stream_every(
            Duration::from_millis(100),
            vec![Ok(LlmChunk::text("a")), Ok(LlmChunk::text("b"))],
        );
    let start = tokio::time::Instant::now();
    m.generate(&request()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let start = tokio::time::Instant::now();
    let mut s = m.generate_stream(&request()).await.unwrap();
    s.next().await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    s.next().await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert!(s.next().await.is_none());
}
