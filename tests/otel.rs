//! OpenTelemetry traces (feature `otel`): a run with a retry, a fallback
//! hop and a cache hit, exported as OTLP/HTTP to a collector in the test
//! that decodes the real protobuf, must arrive as the span tree run →
//! superstep → node → attempt (and backoff) → LLM call → provider, with
//! the attributes that tell what happened. A collector that never answers
//! must cost spans, never the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::error::LlmError;
use aegis::graph::{EngineLimits, InputMapping, NodeSpec};
use aegis::llm::{FallbackLlmAdapter, LlmResponse, LlmUsage, MockLlmAdapter};
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::trace::otel::{Otel, OtelConfig};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{delta, field_name, schema};
use support::otlp::Collector;
use tracing_subscriber::prelude::*;

use DispatchRule::LastWrite;

/// `flaky` fails once (transient) and retries after 250 ms; `lookup` is
/// cached on `topic`; `ask` is a Paladin on a chain whose primary answers
/// 503 and whose backup answers (with token counts).
fn graph() -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("topic", LastWrite),
            ("x", LastWrite),
            ("answer", LastWrite),
        ]),
        EngineLimits::default(),
    );
    g.add_node(
        "flaky",
        NodeSpec::from_fn("flaky", |_, ctx| {
            let attempt = ctx.attempt();
            Box::pin(async move {
                if attempt == 1 {
                    return Err(StateNodeError::transient("index busy"));
                }
                Ok(delta(&[("x", json!(1))]).into())
            })
        }),
    )
    .add_node(
        "lookup",
        NodeSpec::from_fn("lookup", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    )
    .add_node(
        "ask",
        NodeSpec::paladin(
            Paladin::new("Asker").with_model("m"),
            InputMapping::new("{topic}"),
            field_name("answer"),
        ),
    )
    .add_edge(START, "flaky")
    .add_edge("flaky", "lookup")
    .add_edge("lookup", "ask")
    .add_edge("ask", END)
    .set_aegis(
        "flaky",
        Aegis::new().with_retry(
            RetryPolicy::default()
                .with_max_attempts(2)
                .with_initial_interval(Duration::from_millis(250))
                .with_jitter(false),
        ),
    )
    .set_aegis(
        "lookup",
        Aegis::new().with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Fields(vec![field_name("topic")]),
        )),
    );
    g
}

fn engine(runs: usize) -> WarEngine<InMemoryWaypointStore> {
    let mut primary = MockLlmAdapter::new().with_provider_name("primary");
    let mut backup = MockLlmAdapter::new().with_provider_name("backup");
    for _ in 0..runs {
        primary = primary.with_error(LlmError::ProviderError {
            provider: "primary".into(),
            status: 503,
            message: "overloaded".into(),
            retry_after: None,
        });
        backup = backup.with_llm_response(
            LlmResponse::default()
                .with_content("fine")
                .with_usage(LlmUsage::new(12, 3)),
        );
    }
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)]).unwrap();
    WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(chain)
        .with_node_cache(InMemoryNodeCache::new())
}

fn attr(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?;
    Some(match value.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

fn failed(span: &Span) -> bool {
    span.status
        .as_ref()
        .is_some_and(|s| s.code == StatusCode::Error as i32)
}

/// The received spans as a tree.
struct Tree(Vec<Span>);

impl Tree {
    fn children<'a>(&'a self, parent: &'a Span) -> impl Iterator<Item = &'a Span> + 'a {
        self.0
            .iter()
            .filter(move |s| s.parent_span_id == parent.span_id)
    }

    fn child<'a>(&'a self, parent: &'a Span, name: &str) -> &'a Span {
        let found: Vec<&Span> = self.children(parent).filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "one `{name}` under `{}`", parent.name);
        found[0]
    }

    fn named<'a>(&'a self, parent: &'a Span, name: &'a str) -> Vec<&'a Span> {
        self.children(parent).filter(|s| s.name == name).collect()
    }

    fn run(&self, thread: &str) -> &Span {
        let found: Vec<&Span> = self
            .0
            .iter()
            .filter(|s| s.name == "aegis.run" && attr(s, "thread_id").as_deref() == Some(thread))
            .collect();
        assert_eq!(found.len(), 1, "one run span for {thread}");
        assert!(found[0].parent_span_id.is_empty(), "a run is a root span");
        found[0]
    }

    /// The node span `node` of `run`, through its superstep.
    fn node<'a>(&'a self, run: &'a Span, node: &str) -> &'a Span {
        let nodes: Vec<&Span> = self
            .named(run, "aegis.superstep")
            .into_iter()
            .flat_map(|step| self.children(step))
            .filter(|s| s.name == node)
            .collect();
        assert_eq!(nodes.len(), 1, "one `{node}` node span in the run");
        nodes[0]
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_arrives_as_its_span_tree_with_what_happened() {
    let collector = Collector::start();
    let otel =
        Otel::new(OtelConfig::new(collector.endpoint()).with_service_name("otel-test")).unwrap();
    let _subscriber = tracing_subscriber::registry()
        .with(otel.layer())
        .set_default();

    let (engine, g) = (engine(2), graph());
    for thread in ["t1", "t2"] {
        let outcome = engine
            .start(&g, thread, json!({"topic": "launch"}))
            .await
            .unwrap();
        assert!(outcome.is_completed(), "{outcome:?}");
    }
    let flushing = otel.clone();
    tokio::task::spawn_blocking(move || flushing.flush())
        .await
        .unwrap()
        .unwrap();
    let tree = Tree(collector.spans());

    let run = tree.run("t1");
    assert_eq!(attr(run, "outcome").as_deref(), Some("Completed"));
    assert_eq!(tree.named(run, "aegis.superstep").len(), 3);

    // The retry: two attempts, the first failed (transient) and saying
    // how long the wait before the second is; the wait is a span of its own.
    let flaky = tree.node(run, "flaky");
    assert_eq!(attr(flaky, "outcome").as_deref(), Some("succeeded"));
    let attempts = tree.named(flaky, "aegis.attempt");
    assert_eq!(attempts.len(), 2);
    let (first, second) = (attempts[0], attempts[1]);
    assert_eq!(attr(first, "attempt").as_deref(), Some("1"));
    assert_eq!(attr(first, "outcome").as_deref(), Some("failed"));
    assert_eq!(attr(first, "transience").as_deref(), Some("transient"));
    assert_eq!(attr(first, "retry_delay_ms").as_deref(), Some("250"));
    assert!(failed(first));
    assert_eq!(attr(second, "outcome").as_deref(), Some("succeeded"));
    let backoff = tree.child(flaky, "aegis.backoff");
    assert_eq!(attr(backoff, "delay_ms").as_deref(), Some("250"));
    assert!(backoff.start_time_unix_nano >= first.end_time_unix_nano);
    assert!(second.start_time_unix_nano >= backoff.end_time_unix_nano);

    // The hop: the attempt was served by the backup (position 1); its LLM
    // call follows the GenAI conventions and holds one span per provider
    // tried, and the hop as an event.
    let ask = tree.node(run, "ask");
    let attempt = tree.child(ask, "aegis.attempt");
    assert_eq!(attr(attempt, "served_by").as_deref(), Some("backup"));
    assert_eq!(attr(attempt, "chain_position").as_deref(), Some("1"));
    let call = tree.child(attempt, "chat m");
    assert_eq!(attr(call, "gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(attr(call, "gen_ai.system").as_deref(), Some("fallback"));
    assert_eq!(attr(call, "gen_ai.request.model").as_deref(), Some("m"));
    assert_eq!(
        attr(call, "gen_ai.usage.input_tokens").as_deref(),
        Some("12")
    );
    assert_eq!(
        attr(call, "gen_ai.usage.output_tokens").as_deref(),
        Some("3")
    );
    assert_eq!(attr(call, "aegis.served_by").as_deref(), Some("backup"));
    let providers = tree.named(call, "aegis.llm.provider");
    let tried: Vec<(Option<String>, Option<String>, bool)> = providers
        .iter()
        .map(|p| {
            (
                attr(p, "gen_ai.system"),
                attr(p, "aegis.chain_position"),
                failed(p),
            )
        })
        .collect();
    assert_eq!(
        tried,
        vec![
            (Some("primary".into()), Some("0".into()), true),
            (Some("backup".into()), Some("1".into()), false),
        ]
    );
    assert_eq!(
        attr(providers[0], "error.type").as_deref(),
        Some("ProviderError")
    );
    assert_eq!(
        attr(providers[0], "aegis.transience").as_deref(),
        Some("transient")
    );
    assert!(
        call.events.iter().any(|e| e.name == "model fallback hop"),
        "the hop is an event of the call: {:?}",
        call.events
    );

    // The cache: t1's lookup missed and ran; t2's was served, by t1's attempt.
    let missed = tree.node(run, "lookup");
    assert_eq!(attr(missed, "cache_hit").as_deref(), Some("false"));
    assert_eq!(tree.named(missed, "aegis.attempt").len(), 1);
    let hit = tree.node(tree.run("t2"), "lookup");
    assert_eq!(attr(hit, "cache_hit").as_deref(), Some("true"));
    assert_eq!(
        attr(hit, "cache_origin").as_deref(),
        Some("attempt 1 of lookup")
    );
    assert_eq!(
        tree.named(hit, "aegis.attempt").len(),
        0,
        "a hit runs nothing"
    );
    assert_eq!(otel.dropped_spans(), 0);
}

/// A collector that accepts and never answers: the runs finish as they
/// would without it, spans past the queue's bound are dropped and counted.
#[tokio::test(start_paused = true)]
async fn a_collector_that_never_answers_costs_spans_not_the_run() {
    let collector = Collector::silent();
    let otel = Otel::new(
        OtelConfig::new(collector.endpoint())
            .with_queue_capacity(4)
            .with_batch_size(2)
            .with_batch_delay(Duration::ZERO)
            .with_export_timeout(Duration::from_secs(3600)),
    )
    .unwrap();
    let _subscriber = tracing_subscriber::registry()
        .with(otel.layer())
        .set_default();
    let (engine, g) = (engine(20), graph());
    let started = tokio::time::Instant::now();
    for i in 0..20 {
        let outcome = engine
            .start(&g, &format!("t{i}"), json!({"topic": "launch"}))
            .await
            .unwrap();
        assert!(outcome.is_completed(), "{outcome:?}");
    }
    // Only `flaky`'s backoffs took time: 20 of them, 250 ms each.
    assert_eq!(started.elapsed(), Duration::from_millis(20 * 250));
    assert!(otel.dropped_spans() > 0, "the full queue dropped spans");
    assert_eq!(collector.requests(), 0);
}
