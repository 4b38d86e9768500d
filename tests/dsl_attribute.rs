//! `#[aegis(..)]`: each attribute builds exactly the Aegis a hand-written
//! one would, the function stays callable, and the engine runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![warn(clippy::pedantic)]

#[allow(clippy::pedantic)]
mod support;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use aegis::{graph::AegisNodeFn, waypoint::InMemoryWaypointStore};
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::fixtures::field_name;

fn delta(field: &str, value: u32) -> StateDelta {
    let mut d = StateDelta::new();
    d.set(field, value).unwrap();
    d
}

// The design card's example, exactly as written.
#[aegis(retry(max = 5), timeout(idle = "10s"), on_error(route = cancel))]
async fn book(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    ctx.heartbeat();
    let mut delta = StateDelta::new();
    delta.set("booking", state.get("request").cloned().unwrap_or_default())?;
    Ok(delta)
}

#[test]
fn the_design_card_example_builds_the_guides_aegis() {
    let expected = Aegis::new()
        .with_retry(RetryPolicy::default().with_max_attempts(5))
        .with_timeout(TimeoutPolicy::idle(Duration::from_secs(10)))
        .with_on_error(ErrorHandlerSpec::Route {
            to: NodeId::new("cancel"),
            error_field: field_name("book_error"),
        });
    assert_eq!(<book as AegisNodeFn>::aegis(), expected);
    assert_eq!(<book as AegisNodeFn>::ID, "book");
    // The kind is the id, not the module path: moving `book` keeps it.
    assert_eq!(<book as AegisNodeFn>::KIND, "book");
}

#[tokio::test]
async fn the_function_stays_callable_as_written() {
    let schema = BattlefieldSchema::new(vec![FieldSpec::new(
        field_name("request"),
        DispatchRule::LastWrite,
        None,
        false,
    )]);
    let state =
        aegis_runtime::__internal::initial_state(&schema, &json!({"request": "LHR-JFK"})).unwrap();
    let out = book(&state, &NodeContext::detached("book")).await.unwrap();
    assert_eq!(out.get("booking"), Some(&json!("LHR-JFK")));
}

#[aegis(retry(
    max = 4,
    initial = "250ms",
    factor = 3.0,
    max_interval = "1m30s",
    jitter = false,
    on = unknown
))]
async fn every_retry_key(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::end(StateDelta::new()))
}

#[aegis(retry)]
async fn bare_retry(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = all, factor = 1))]
async fn retry_all(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = never, jitter))]
async fn retry_never(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = "rate-limit-only", initial = "0ms"))]
async fn retry_custom(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn retry_keys_map_field_by_field_and_unset_ones_take_the_defaults() {
    assert_eq!(
        every_retry_key::aegis().retry,
        Some(
            RetryPolicy::default()
                .with_max_attempts(4)
                .with_initial_interval(Duration::from_millis(250))
                .with_backoff_factor(3.0)
                .with_max_interval(Duration::from_secs(90))
                .with_jitter(false)
                .with_retry_on(RetryPredicate::TransientOrUnknown)
        )
    );
    assert_eq!(bare_retry::aegis().retry, Some(RetryPolicy::default()));
    assert_eq!(
        retry_all::aegis().retry,
        Some(
            RetryPolicy::default()
                .with_retry_on(RetryPredicate::Always)
                .with_backoff_factor(1.0)
        )
    );
    assert_eq!(
        retry_never::aegis().retry,
        Some(
            RetryPolicy::default()
                .with_retry_on(RetryPredicate::Never)
                .with_jitter(true)
        )
    );
    assert_eq!(
        retry_custom::aegis().retry,
        Some(
            RetryPolicy::default()
                .with_retry_on(RetryPredicate::Custom("rate-limit-only".into()))
                .with_initial_interval(Duration::ZERO)
        )
    );
    for aegis in [
        every_retry_key::aegis(),
        bare_retry::aegis(),
        retry_all::aegis(),
    ] {
        assert!(aegis.timeout.is_none() && aegis.on_error.is_none() && aegis.cache.is_none());
    }
}

#[aegis(retry(max = 4, respect_retry_after = true, max_retry_after = "45s"))]
async fn retry_after_floor(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(respect_retry_after))]
async fn retry_after_default_cap(
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn the_retry_after_floor_keys_map_to_the_policy() {
    assert_eq!(
        retry_after_floor::aegis().retry,
        Some(
            RetryPolicy::default()
                .with_max_attempts(4)
                .with_respect_retry_after(true)
                .with_max_retry_after(Duration::from_secs(45))
        )
    );
    assert_eq!(
        retry_after_default_cap::aegis().retry,
        Some(RetryPolicy::default().with_respect_retry_after(true))
    );
    // In `graph!`'s `default_aegis` too: the grammar is shared.
    let graph = graph! {
        schema { out: LastWrite }
        nodes { bare_retry }
        default_aegis { retry(respect_retry_after = true, max_retry_after = "2m") }
        edges { START -> bare_retry -> END }
    };
    let default = graph.default_aegis().unwrap().retry.clone().unwrap();
    assert!(default.respect_retry_after);
    assert_eq!(default.max_retry_after, Duration::from_secs(120));
}

#[aegis(timeout(run = "2m", idle = "1h2m3s4ms"))]
async fn both_timeouts(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(timeout(run = "120s"))]
async fn run_timeout_only(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn timeouts_are_exact_durations() {
    assert_eq!(
        both_timeouts::aegis().timeout,
        Some(
            TimeoutPolicy::run(Duration::from_secs(120))
                .with_idle_timeout(Duration::from_millis(3_723_004))
        )
    );
    assert_eq!(
        run_timeout_only::aegis().timeout,
        Some(TimeoutPolicy::run(Duration::from_secs(120)))
    );
}

#[aegis(timeout(first_chunk = "5s", idle = "10s"))]
async fn streamed(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn first_chunk_is_a_timeout_of_its_own() {
    assert_eq!(
        streamed::aegis().timeout,
        Some(TimeoutPolicy::idle(Duration::from_secs(10)).with_first_chunk(Duration::from_secs(5)))
    );
}

#[aegis(on_error(route = cancel, error_field = booking_error))]
async fn explicit_error_field(
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(id = "booker", on_error(route = cancel))]
async fn renamed(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(absorb(summary = "unavailable", retries_left = 0, score = -1.5, tags = ["a", null], done = true)))]
async fn absorbing(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(absorb))]
async fn absorbing_nothing(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(custom = "escalate"))]
async fn escalating(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn each_handler_shape_maps_to_its_spec() {
    assert_eq!(
        explicit_error_field::aegis().on_error,
        Some(ErrorHandlerSpec::Route {
            to: NodeId::new("cancel"),
            error_field: field_name("booking_error"),
        })
    );
    // The default error field follows the node id, not the function name.
    assert_eq!(<renamed as AegisNodeFn>::ID, "booker");
    assert_eq!(
        renamed::aegis().on_error,
        Some(ErrorHandlerSpec::Route {
            to: NodeId::new("cancel"),
            error_field: field_name("booker_error"),
        })
    );
    let mut fallback_delta = StateDelta::new();
    fallback_delta
        .set("summary", "unavailable")
        .unwrap()
        .set("retries_left", 0)
        .unwrap()
        .set("score", -1.5)
        .unwrap()
        .set("tags", json!(["a", null]))
        .unwrap()
        .set("done", true)
        .unwrap();
    assert_eq!(
        absorbing::aegis().on_error,
        Some(ErrorHandlerSpec::Absorb { fallback_delta })
    );
    assert_eq!(
        absorbing_nothing::aegis().on_error,
        Some(ErrorHandlerSpec::Absorb {
            fallback_delta: StateDelta::new()
        })
    );
    assert_eq!(
        escalating::aegis().on_error,
        Some(ErrorHandlerSpec::Custom("escalate".into()))
    );
}

#[aegis(cache(ttl = "15m", key = fields(question, locale)))]
async fn cached_by_fields(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "1h", key = default))]
async fn cached_by_default(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "500ms"))]
async fn cached_briefly(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "1m", fallback_results = true))]
async fn cached_even_from_a_fallback(
    _: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn cache_policies_map_ttl_and_key() {
    assert_eq!(
        cached_even_from_a_fallback::aegis().cache,
        Some(
            CachePolicy::new(Duration::from_secs(60), CacheKeySpec::Default)
                .with_cache_fallback_results(true)
        )
    );
    assert_eq!(
        cached_by_fields::aegis().cache,
        Some(CachePolicy::new(
            Duration::from_secs(15 * 60),
            CacheKeySpec::Fields(vec![field_name("question"), field_name("locale")])
        ))
    );
    assert_eq!(
        cached_by_default::aegis().cache,
        Some(CachePolicy::new(
            Duration::from_secs(3600),
            CacheKeySpec::Default
        ))
    );
    assert_eq!(
        cached_briefly::aegis().cache,
        Some(CachePolicy::new(
            Duration::from_millis(500),
            CacheKeySpec::Default
        ))
    );
}

#[aegis]
async fn plain(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[test]
fn a_bare_attribute_is_a_plain_node_under_the_graph_default() {
    assert_eq!(plain::aegis(), Aegis::default());
    let default = Aegis::new().with_timeout(TimeoutPolicy::run(Duration::from_secs(30)));
    let mut graph = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    graph
        .add_aegis_node(plain {})
        .add_aegis_node(run_timeout_only {});
    graph.with_default_aegis(default.clone());
    assert_eq!(graph.aegis_for(&NodeId::new("plain")), Some(&default));
    assert_eq!(
        graph.aegis_for(&NodeId::new("run_timeout_only")),
        Some(&run_timeout_only::aegis())
    );
    let Some(NodeSpec::Function(node)) = graph.node("plain") else {
        panic!("plain is not a Function node")
    };
    assert_eq!(node.kind_name(), "plain");
}

#[derive(Debug)]
struct Declined;

impl From<Declined> for StateNodeError {
    fn from(_: Declined) -> Self {
        StateNodeError::permanent("declined")
    }
}

#[aegis]
async fn user_error_type(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, Declined> {
    if state.get("ok").is_some() {
        Ok(StateDelta::new())
    } else {
        Err(Declined)
    }
}

#[tokio::test]
async fn user_errors_convert_through_into_state_node_error() {
    let err =
        <user_error_type as AegisNodeFn>::run(&Battlefield::new(), &NodeContext::detached("x"))
            .await
            .unwrap_err();
    assert_eq!(err, StateNodeError::permanent("declined"));
    assert_eq!(err.transience, Transience::Permanent);
}

static FLAKY_CALLS: AtomicU32 = AtomicU32::new(0);

#[aegis(retry(max = 3, initial = "100ms", factor = 2.0, jitter = false))]
async fn flaky(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    FLAKY_CALLS.fetch_add(1, Ordering::SeqCst);
    if ctx.attempt() < 3 {
        return Err(StateNodeError::transient("try again"));
    }
    Ok(delta("answer", ctx.attempt()))
}

#[tokio::test(start_paused = true)]
async fn the_engine_applies_the_attribute_policy_with_exact_waits() {
    let graph = graph! {
        schema { answer: LastWrite }
        nodes { flaky }
        edges { START -> flaky -> END }
    };
    let engine = WarEngine::new(InMemoryWaypointStore::new());
    let started = tokio::time::Instant::now();
    let outcome = engine.start(&graph, "t1", json!({})).await.unwrap();
    let state = outcome.into_result().unwrap();
    assert_eq!(state.get("answer"), Some(&json!(3)));
    assert_eq!(FLAKY_CALLS.load(Ordering::SeqCst), 3);
    // 100 ms before attempt 2, 200 ms before attempt 3, nothing else.
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}
