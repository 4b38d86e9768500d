//! Extreme settings at the provider boundary: any circuit-breaker cool-down
//! and any retry hint a provider sends (huge, fractional, negative, NaN, a
//! far-future or past date) are accepted without a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::{
    error::LlmError,
    llm::{
        AnthropicLlmAdapter, CircuitBreaker, CircuitBreakerConfig, CircuitState, LlmMessage,
        LlmPort, LlmRequest, MockLlmAdapter, OpenAiCompatibleLlmAdapter,
    },
};
use aegis_runtime::__internal::{map_http_status, parse_retry_after, retry_after_hint};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use support::http_server::{Reply, TestServer};

fn request() -> LlmRequest {
    LlmRequest::new("m", vec![LlmMessage::user("hi")])
}

/// Wed, 21 Oct 2015 07:28:00 GMT.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480)
}

#[test]
fn hints_at_the_edges_are_exact_saturated_or_absent() {
    let hint = |name: &str, value: &str| retry_after_hint(&[(name, value)], now());
    let ms = "retry-after-ms";
    let s = "retry-after";
    assert_eq!(hint(ms, "1e300"), Some(Duration::MAX));
    assert_eq!(hint(ms, "inf"), Some(Duration::MAX));
    assert_eq!(
        hint(ms, &u64::MAX.to_string()),
        Some(Duration::from_millis(u64::MAX))
    );
    assert_eq!(hint(ms, "1.5"), Some(Duration::from_micros(1500)));
    assert_eq!(hint(ms, "-0"), Some(Duration::ZERO));
    assert_eq!(hint(ms, "-1"), None);
    assert_eq!(hint(ms, "NaN"), None);
    assert_eq!(
        hint(s, &u64::MAX.to_string()),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(hint(s, "1e30"), Some(Duration::MAX));
    assert_eq!(hint(s, "2.25"), Some(Duration::from_millis(2250)));
    assert_eq!(hint(s, "-5"), None);
    assert_eq!(hint(s, "nan"), None);
    assert_eq!(
        hint(s, "Fri, 31 Dec 9999 23:59:59 GMT"),
        Some(Duration::from_secs(253_402_300_799 - 1_445_412_480))
    );
    assert_eq!(
        hint(s, "Thu, 01 Jan 1970 00:00:00 GMT"),
        Some(Duration::ZERO)
    );
    // A far-future "now" and a date before it: zero, not an underflow.
    let late = SystemTime::UNIX_EPOCH + Duration::from_secs(400 * 365 * 86_400);
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", late),
        Some(Duration::ZERO)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_whole_hint_is_exact(v in any::<u64>()) {
        prop_assert_eq!(
            retry_after_hint(&[("retry-after", &v.to_string())], now()),
            Some(Duration::from_secs(v))
        );
        let ms = retry_after_hint(&[("retry-after-ms", &v.to_string())], now()).unwrap();
        // Through f64: within its rounding of the value, never a panic.
        let want = v as f64 / 1000.0;
        prop_assert!((ms.as_secs_f64() - want).abs() <= want * 1e-9 + 1e-9);
    }

    #[test]
    fn any_float_hint_is_saturated_or_refused(v in any::<f64>()) {
        for name in ["retry-after", "retry-after-ms"] {
            let got = retry_after_hint(&[(name, &v.to_string())], now());
            if v.is_nan() || v < 0.0 {
                prop_assert_eq!(got, None);
            } else {
                let got = got.unwrap();
                let secs = if name == "retry-after" { v } else { v / 1000.0 };
                if secs >= Duration::MAX.as_secs_f64() {
                    prop_assert_eq!(got, Duration::MAX);
                } else {
                    prop_assert!((got.as_secs_f64() - secs).abs() <= secs * 1e-9 + 1e-9);
                }
            }
        }
    }

    #[test]
    fn any_header_text_maps_without_panicking(
        status in any::<u16>(),
        ms in any::<String>(),
        secs in any::<String>(),
        body in any::<String>(),
    ) {
        let e = map_http_status("p", status, &body, &[("retry-after-ms", &ms), ("Retry-After", &secs)]);
        let _ = (e.to_string(), e.transience());
    }

    #[test]
    fn any_cool_down_opens_and_probes_without_panicking(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let cool_down = Duration::new(secs, nanos);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let inner = MockLlmAdapter::new()
                .with_provider_name("p")
                .with_error(LlmError::NetworkError("down".into()))
                .with_response("up");
            let cb = CircuitBreaker::with_config(
                Arc::new(inner.clone()),
                CircuitBreakerConfig::default()
                    .with_failure_threshold(1)
                    .with_cool_down(cool_down),
            );
            cb.generate(&request()).await.unwrap_err();
            let until = match cb.state() {
                CircuitState::Open { until } => until,
                other => panic!("not open: {other:?}"),
            };
            let now = tokio::time::Instant::now();
            assert_eq!(until, now.checked_add(cool_down));
            assert!(matches!(cb.generate(&request()).await, Err(LlmError::CircuitOpen { .. })));
            if until.is_some() && cool_down <= Duration::from_secs(1 << 40) {
                tokio::time::advance(cool_down).await;
                assert_eq!(cb.generate(&request()).await.unwrap().content, "up");
            }
        });
    }
}

#[tokio::test(start_paused = true)]
async fn a_cool_down_too_long_for_an_instant_keeps_the_circuit_open() {
    let inner = MockLlmAdapter::new()
        .with_provider_name("p")
        .with_error(LlmError::NetworkError("down".into()))
        .with_response("up");
    let cb = CircuitBreaker::with_config(
        Arc::new(inner.clone()),
        CircuitBreakerConfig::default()
            .with_failure_threshold(1)
            .with_cool_down(Duration::MAX),
    );
    cb.generate(&request()).await.unwrap_err();
    assert_eq!(cb.state(), CircuitState::Open { until: None });
    tokio::time::advance(Duration::from_secs(100 * 365 * 86_400)).await;
    assert!(matches!(
        cb.generate(&request()).await,
        Err(LlmError::CircuitOpen { .. })
    ));
    assert_eq!(inner.call_count(), 1);
}

/// Hostile hints sent by a real server reach `generate` and `stream` of both
/// adapters as a `RateLimited` error, never a panic.
#[tokio::test]
async fn hostile_hints_from_a_server_never_panic() {
    let cases: [(&str, &str, Option<Duration>); 6] = [
        ("retry-after-ms", "1e300", Some(Duration::MAX)),
        ("retry-after-ms", "-3", None),
        ("retry-after-ms", "NaN", None),
        ("retry-after", "0.5", Some(Duration::from_millis(500))),
        (
            "retry-after",
            "99999999999999999999999",
            Some(Duration::MAX),
        ),
        (
            "retry-after",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            Some(Duration::ZERO),
        ),
    ];
    for (name, value, want) in cases {
        let replies = (0..4)
            .map(|_| Reply::body(429, "slow down").header(name, value))
            .collect();
        let server = TestServer::start(replies).await;
        let openai = OpenAiCompatibleLlmAdapter::new(format!("{}/v1", server.url())).unwrap();
        let anthropic = AnthropicLlmAdapter::new(format!("{}/v1", server.url())).unwrap();
        let ports: [&dyn LlmPort; 2] = [&openai, &anthropic];
        for port in ports {
            let want = LlmError::RateLimited { retry_after: want };
            assert_eq!(
                port.generate(&request()).await.unwrap_err(),
                want,
                "{name}: {value}"
            );
            let Err(e) = port.generate_stream(&request()).await else {
                panic!("a 429 stream succeeded");
            };
            assert_eq!(e, want, "{name}: {value}");
        }
    }
}

/// Transport timeouts and the error-body deadline at `Duration::MAX` are
/// "no bound", never an `Instant` overflow, on every path of both adapters.
#[tokio::test]
async fn duration_max_transport_timeouts_never_panic() {
    let ok_openai = serde_json::json!({"model": "m", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]});
    let ok_anthropic =
        serde_json::json!({"model": "m", "content": [{"type": "text", "text": "hi"}]});
    let server = TestServer::start(vec![
        Reply::json(200, &ok_openai),
        Reply::body(503, "busy"),
        Reply::json(200, &ok_anthropic),
        Reply::body(503, "busy"),
    ])
    .await;
    let base = format!("{}/v1", server.url());
    let openai = OpenAiCompatibleLlmAdapter::new(&base)
        .unwrap()
        .with_timeouts(Duration::MAX, Duration::MAX)
        .unwrap()
        .with_error_body_deadline(Duration::MAX);
    let anthropic = AnthropicLlmAdapter::new(&base)
        .unwrap()
        .with_timeouts(Duration::MAX, Duration::MAX)
        .unwrap()
        .with_error_body_deadline(Duration::MAX);
    let ports: [&dyn LlmPort; 2] = [&openai, &anthropic];
    for port in ports {
        assert_eq!(port.generate(&request()).await.unwrap().content, "hi");
        assert_eq!(
            port.generate(&request()).await.unwrap_err().status(),
            Some(503)
        );
    }
}
