//! `graph!` builds the same graph as the builder API: same schema, nodes,
//! edges, Aegis sidecar and fingerprint.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![warn(clippy::pedantic)]

#[allow(clippy::pedantic)]
mod support;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::graph::StateNode;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::{graph::AegisNodeFn, paladin::Paladin, waypoint::InMemoryWaypointStore};
use serde_json::json;
use std::time::Duration;
use support::fixtures::field_name;

#[aegis(retry(max = 3), on_error(route = cancel, error_field = booking_error))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("booking", "LHR-JFK")?;
    Ok(delta)
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "15m", key = fields(question)))]
async fn answer(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("answer", state.get("question").cloned().unwrap_or_default())?;
    Ok(delta)
}

#[aegis(id = "summariser", timeout(run = "30s"))]
async fn summarise(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("total", 1)?;
    Ok(delta)
}

struct Quiet;

#[async_trait]
impl StateNode for Quiet {
    async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        Ok(Directive::end(StateDelta::new()))
    }

    fn kind_name(&self) -> &'static str {
        "quiet"
    }
}

fn writer() -> Paladin {
    Paladin::new("Writer").with_model("mock")
}

fn limits() -> EngineLimits {
    EngineLimits::default().with_max_supersteps(50)
}

fn dsl_graph() -> WarGraph {
    graph! {
        crate = "::aegis";
        limits = limits();
        schema {
            question: LastWrite required,
            booking: LastWrite,
            booking_error: LastWrite,
            answer: LastWrite = "none",
            draft: LastWrite,
            log: Append = [] cache = deny,
            total: Sum = 0,
            meta: Merge = { "source": "dsl", "tags": [1, -2.5, true, null] },
        }
        nodes {
            book,
            cancel,
            answer,
            summariser = summarise,
            #[aegis(on_error(absorb(draft = "n/a")), timeout(idle = "5s"))]
            writer = paladin(writer(), "Draft a reply to: {question}" -> draft),
            #[aegis]
            quiet = node(NodeSpec::function(Quiet)),
        }
        default_aegis { retry(max = 2), timeout(run = "1m") }
        edges {
            START -> book -> [answer, writer] -> summariser -> END;
            cancel -> END;
            quiet ?> "pick" -> [answer, END];
        }
        dynamic { cancel, quiet }
    }
}

fn builder_graph() -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        FieldSpec::new(field_name("question"), DispatchRule::LastWrite, None, true),
        FieldSpec::new(field_name("booking"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(
            field_name("booking_error"),
            DispatchRule::LastWrite,
            None,
            false,
        ),
        FieldSpec::new(
            field_name("answer"),
            DispatchRule::LastWrite,
            Some(json!("none")),
            false,
        ),
        FieldSpec::new(field_name("draft"), DispatchRule::LastWrite, None, false),
        FieldSpec::new(
            field_name("log"),
            DispatchRule::Append,
            Some(json!([])),
            false,
        )
        .with_cache(aegis::state::CacheMarker::Deny),
        FieldSpec::new(
            field_name("total"),
            DispatchRule::Sum,
            Some(json!(0)),
            false,
        ),
        FieldSpec::new(
            field_name("meta"),
            DispatchRule::Merge,
            Some(json!({"source": "dsl", "tags": [1, -2.5, true, null]})),
            false,
        ),
    ]);
    let mut graph = WarGraph::new(schema, limits());
    graph
        .add_aegis_node(book {})
        .add_aegis_node(cancel {})
        .add_aegis_node(answer {})
        .add_aegis_node(summarise {})
        .add_node(
            "writer",
            NodeSpec::paladin(
                writer(),
                InputMapping::new("Draft a reply to: {question}"),
                field_name("draft"),
            ),
        )
        .add_node("quiet", NodeSpec::function(Quiet));
    let mut fallback_delta = StateDelta::new();
    fallback_delta.set("draft", "n/a").unwrap();
    graph.set_aegis(
        "writer",
        Aegis::new()
            .with_timeout(TimeoutPolicy::idle(Duration::from_secs(5)))
            .with_on_error(ErrorHandlerSpec::Absorb { fallback_delta }),
    );
    graph.set_aegis("quiet", Aegis::default());
    graph.with_default_aegis(
        Aegis::new()
            .with_retry(RetryPolicy::default().with_max_attempts(2))
            .with_timeout(TimeoutPolicy::run(Duration::from_secs(60))),
    );
    graph
        .add_edge(START, "book")
        .add_edge("book", "answer")
        .add_edge("book", "writer")
        .add_edge("answer", "summariser")
        .add_edge("writer", "summariser")
        .add_edge("summariser", END)
        .add_edge("cancel", END)
        .add_conditional_edges("quiet", "pick", ["answer", END])
        .mark_dynamic_target("cancel")
        .mark_dynamic_target("quiet");
    graph
}

#[test]
fn graph_macro_and_builder_have_the_same_fingerprint() {
    let dsl = dsl_graph();
    let built = builder_graph();
    assert_eq!(dsl.fingerprint(), built.fingerprint());

    // The fingerprint does see what graph! declares: a different absorbed
    // value is a different graph.
    let mut changed = builder_graph();
    let mut other = StateDelta::new();
    other.set("draft", "unavailable").unwrap();
    changed.set_aegis(
        "writer",
        Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
            fallback_delta: other,
        }),
    );
    assert_ne!(dsl.fingerprint(), changed.fingerprint());
}

#[test]
fn graph_macro_builds_the_declared_parts() {
    let dsl = dsl_graph();
    let built = builder_graph();
    assert_eq!(dsl.schema(), built.schema());
    assert_eq!(dsl.limits(), built.limits());
    let ids = |g: &WarGraph| {
        g.nodes()
            .map(|(id, spec)| (id.to_string(), spec.kind()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&dsl), ids(&built));
    let edges = |g: &WarGraph| {
        g.edges()
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(edges(&dsl), edges(&built));
    assert_eq!(dsl.conditional_edges(), built.conditional_edges());
    assert_eq!(dsl.default_aegis(), built.default_aegis());
    for (id, _) in built.nodes() {
        assert_eq!(dsl.aegis_for(id), built.aegis_for(id), "aegis of {id}");
    }
    // A function's own Aegis wins wholesale over the default ...
    assert_eq!(
        dsl.aegis_for(&NodeId::new("summariser")),
        Some(&summarise::aegis())
    );
    // ... a bare #[aegis] function gets the default ...
    assert_eq!(dsl.aegis_for(&NodeId::new("cancel")), dsl.default_aegis());
    // ... and a bare #[aegis] in graph! is an empty Aegis of its own.
    assert_eq!(
        dsl.aegis_for(&NodeId::new("quiet")),
        Some(&Aegis::default())
    );
}

#[aegis(retry(max = 2, initial = "1s", jitter = false, on = all))]
async fn first(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("log", format!("first#{}", ctx.attempt()))?;
    if ctx.attempt() == 1 {
        return Err("flaky".into());
    }
    Ok(delta)
}

#[aegis]
async fn second(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let seen = state.list_len("log").unwrap_or(0);
    let mut delta = StateDelta::new();
    delta.set("log", format!("second saw {seen}"))?;
    delta.set("count", 1)?;
    Ok(delta)
}

#[tokio::test(start_paused = true)]
async fn a_graph_macro_graph_runs_on_the_engine() {
    let graph = graph! {
        schema {
            log: Append = [],
            count: Sum = 10,
        }
        nodes { first, second }
        edges { START -> first -> second -> END }
    };
    graph.validate().unwrap();
    let engine = WarEngine::new(InMemoryWaypointStore::new());
    let started = tokio::time::Instant::now();
    let state = engine
        .start(&graph, "run", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("log"), Some(&json!(["first#2", "second saw 1"])));
    assert_eq!(state.get("count"), Some(&json!(11)));
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

#[aegis]
async fn jump(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::goto(StateDelta::new(), "side"))
}

#[aegis]
async fn step(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("log", "step")?;
    Ok(delta)
}

#[aegis]
async fn side(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("log", "side")?;
    Ok(delta)
}

/// `side` has an edge into it, from `step`, so graph! takes the graph; the
/// goto to it from `jump`, which has none, fails the run, and the error
/// names graph!'s fix. With the fix, the goto replaces `jump`'s edges.
#[tokio::test]
async fn a_goto_to_a_node_without_an_edge_from_it_names_dynamic() {
    let engine = WarEngine::new(InMemoryWaypointStore::new());
    let unmarked = graph! {
        schema { log: Append = [] }
        nodes { jump, step, side }
        edges { START -> jump -> step -> side -> END }
    };
    let err = engine
        .start(&unmarked, "unmarked", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidGoto { ref node, ref target } if node.as_str() == "jump" && target.as_str() == "side"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("`dynamic { side }` in graph!"),
        "{err}"
    );

    let marked = graph! {
        schema { log: Append = [] }
        nodes { jump, step, side }
        edges { START -> jump -> step -> side -> END }
        dynamic { side }
    };
    let state = engine
        .start(&marked, "marked", json!({}))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(state.get("log"), Some(&json!(["side"])));
}

mod from_another_crate {
    use super::*;
    // The node functions of another crate, imported as a user would.
    use aegis_ui_nodes::{book, cancel};

    fn dsl() -> WarGraph {
        graph! {
            schema { traveller: LastWrite, booking: LastWrite, book_error: LastWrite }
            nodes { book, cancel }
            edges { START -> book -> END; cancel -> END; }
        }
    }

    fn builder() -> WarGraph {
        let schema = BattlefieldSchema::new(vec![
            FieldSpec::new(
                field_name("traveller"),
                DispatchRule::LastWrite,
                None,
                false,
            ),
            FieldSpec::new(field_name("booking"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(
                field_name("book_error"),
                DispatchRule::LastWrite,
                None,
                false,
            ),
        ]);
        let mut graph = WarGraph::new(schema, EngineLimits::default());
        graph
            .add_aegis_node(book {})
            .add_aegis_node(cancel {})
            .add_edge(START, "book")
            .add_edge("book", END)
            .add_edge("cancel", END);
        graph
    }

    #[test]
    fn graph_macro_reads_their_attributes_as_the_builder_does() {
        let (dsl, built) = (dsl(), builder());
        assert_eq!(dsl.fingerprint(), built.fingerprint());
        assert_eq!(
            dsl.aegis_for(&NodeId::new("book")),
            Some(&<book as AegisNodeFn>::aegis())
        );
        assert_eq!(
            dsl.aegis_for(&NodeId::new("book"))
                .and_then(|a| a.retry.as_ref())
                .map(|r| r.max_attempts),
            Some(3)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn and_run_their_policies_on_the_engine() {
        let graph = dsl();
        graph.validate().unwrap();
        let engine = WarEngine::new(InMemoryWaypointStore::new());
        // No traveller: `book` fails three times, and its route runs `cancel`.
        let state = engine
            .start(&graph, "cross-crate", json!({}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(state.get("booking"), Some(&json!("cancelled")));
        assert!(state.get("book_error").is_some());
        let state = engine
            .start(&graph, "cross-crate-ok", json!({"traveller": "Ada"}))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(state.get("booking"), Some(&json!("booked")));
    }
}
