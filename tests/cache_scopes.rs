//! Cache scopes, code versions and namespaces through the engine: which
//! edits a node's cache entries survive, and which they never survive.
//!
//! - `scope = node` entries survive unrelated edits to the graph (a node
//!   added, an unused field, another node's `on_error`, an edge elsewhere);
//!   graph-scoped ones (the default) do not.
//! - In both scopes, a node whose code (an `#[aegis]` body, a builder's
//!   version), prompt, model or input changed misses.
//! - Engines in different cache namespaces never serve each other, over
//!   one in-memory cache or one real Redis; the same namespace shares.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::cache::CacheKey;
use aegis::cache::NodeCache;
#[cfg(feature = "redis-cache")]
use aegis::cache::RedisNodeCache;
use aegis::graph::AegisNode;
use aegis::graph::AegisNodeFn;
use aegis::graph::EngineLimits;
use aegis::graph::FnNode;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::MockLlmAdapter;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::policy::CacheScope;
use aegis::policy::ErrorHandlerSpec;
use aegis::prelude::*;
use aegis::waypoint::NodeExecutionRecord;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::*;

/// Two versions of one node: the same id and graph, different bodies.
mod v1 {
    use aegis::prelude::*;

    #[aegis(id = "answer", cache(ttl = "15m"))]
    pub(crate) async fn answer(
        state: &Battlefield,
        _: &NodeContext,
    ) -> Result<StateDelta, StateNodeError> {
        let q = state
            .get("question")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        let mut delta = StateDelta::new();
        delta.set("answer", format!("v1 answer to {q}"))?;
        Ok(delta)
    }
}

mod v2 {
    use aegis::prelude::*;

    #[aegis(id = "answer", cache(ttl = "15m"))]
    pub(crate) async fn answer(
        state: &Battlefield,
        _: &NodeContext,
    ) -> Result<StateDelta, StateNodeError> {
        let q = state
            .get("question")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        let mut delta = StateDelta::new();
        delta.set("answer", format!("v2 answer to {q}"))?;
        Ok(delta)
    }
}

/// `v1::answer` again, laid out differently and documented: the same code.
#[rustfmt::skip]
mod v1_reformatted {
    use aegis::prelude::*;

    /// Answers the question, exactly as `v1::answer` does.
    ///
    /// (Only the layout, the comments and this doc comment differ.)
    #[aegis(id = "answer", cache(ttl = "15m"))]
    pub(crate) async fn answer(state:&Battlefield,_:&NodeContext,)->Result<StateDelta,StateNodeError>{
        // The question, or "?" when there is none.
        let q=state.get("question").and_then(|v|v.as_str()).unwrap_or("?");
        let mut delta=StateDelta::new();
        /* as before */ delta.set("answer",format!("v1 answer to {q}"))?;
        Ok(delta)
    }
}

/// A client that carries its tenant's identity, as the leak had it.
struct TenantClient {
    tenant: &'static str,
}

#[aegis(cache(ttl = "15m", scope = node))]
async fn lookup(
    client: &TenantClient,
    state: &Battlefield,
    _: &NodeContext,
) -> Result<StateDelta, StateNodeError> {
    let q = state
        .get("question")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    let mut delta = StateDelta::new();
    delta.set("answer", format!("{} answers {q}", client.tenant))?;
    Ok(delta)
}

fn policy(scope: CacheScope) -> Aegis {
    Aegis::new().with_cache(
        CachePolicy::new(Duration::from_secs(15 * 60), CacheKeySpec::Default).with_scope(scope),
    )
}

const SCOPES: [CacheScope; 2] = [CacheScope::Graph, CacheScope::Node];

/// The record of `node` in `thread`'s history.
async fn record_of(
    engine: &WarEngine<InMemoryWaypointStore>,
    thread: &str,
    node: &str,
) -> NodeExecutionRecord {
    records(engine, thread)
        .await
        .into_iter()
        .find(|r| r.node_id.as_str() == node)
        .unwrap_or_else(|| panic!("`{node}` did not run in {thread}"))
}

/// Whether `node` was served from the cache in `thread`; on a hit, the
/// scope its origin records.
async fn served(
    engine: &WarEngine<InMemoryWaypointStore>,
    thread: &str,
    node: &str,
) -> Option<CacheScope> {
    let record = record_of(engine, thread, node).await;
    record.cache_hit.then(|| {
        record
            .cache_origin
            .as_ref()
            .map(|o| o.scope)
            .expect("a hit reports its origin")
    })
}

// ---------------------------------------------------------------------------
// Unrelated edits: the triage graph.

/// What a deploy changed elsewhere in the triage graph.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Edit {
    Nothing,
    NodeAdded,
    UnusedField,
    AbsorbOnAnotherNode,
    EdgeElsewhere,
}

const EDITS: [Edit; 4] = [
    Edit::NodeAdded,
    Edit::UnusedField,
    Edit::AbsorbOnAnotherNode,
    Edit::EdgeElsewhere,
];

/// `START -> classify -> END` beside `START -> audit -> archive -> END`,
/// `classify` cached in `scope`, with `edit` made elsewhere.
fn triage(classify: NodeSpec, scope: CacheScope, edit: Edit) -> WarGraph {
    let mut fields = vec![("ticket", LastWrite), ("label", LastWrite), ("log", Append)];
    if edit == Edit::UnusedField {
        fields.push(("priority", LastWrite));
    }
    let mut g = WarGraph::new(schema(&fields), EngineLimits::default());
    g.add_node("classify", classify)
        .add_node("audit", write("log", json!("audited")))
        .add_node("archive", write("log", json!("archived")))
        .add_edge(START, "classify")
        .add_edge("classify", END)
        .add_edge(START, "audit")
        .set_aegis("classify", policy(scope));
    if edit == Edit::EdgeElsewhere {
        g.add_edge("audit", END)
            .add_edge(START, "archive")
            .add_edge("archive", END);
    } else {
        g.add_edge("audit", "archive").add_edge("archive", END);
    }
    if edit == Edit::NodeAdded {
        g.add_node("notify", write("log", json!("notified")))
            .add_edge("archive", "notify")
            .add_edge("notify", END);
    }
    if edit == Edit::AbsorbOnAnotherNode {
        g.set_aegis(
            "audit",
            Aegis::new().with_on_error(ErrorHandlerSpec::Absorb {
                fallback_delta: delta(&[("log", json!("audit unavailable"))]),
            }),
        );
    }
    g
}

/// `classify` as a Paladin node on `model` with the prompt `template`.
fn classifier(template: &str, model: &str) -> NodeSpec {
    NodeSpec::paladin(
        Paladin::new("Triage").with_model(model),
        InputMapping::new(template),
        field_name("label"),
    )
}

/// An engine running Paladin nodes on `llm`, caching in `cache`.
fn llm_engine(
    llm: &MockLlmAdapter,
    cache: &Arc<dyn NodeCache>,
) -> WarEngine<InMemoryWaypointStore> {
    WarEngine::new(InMemoryWaypointStore::new())
        .with_llm(llm.clone())
        .with_node_cache(cache.clone())
}

const TICKETS: [&str; 3] = ["printer on fire", "password reset", "refund please"];

/// Runs `graph` over every ticket, on threads `{run}-{i}`; how many of
/// them `classify` served from the cache, and the scopes those hits report.
async fn triage_run(
    engine: &WarEngine<InMemoryWaypointStore>,
    graph: &WarGraph,
    run: &str,
) -> (usize, Vec<CacheScope>) {
    let mut scopes = Vec::new();
    for (i, ticket) in TICKETS.iter().enumerate() {
        let thread = format!("{run}-{i}");
        let state = run_to_state(engine, graph, &thread, json!({"ticket": ticket})).await;
        assert_eq!(state.get("label"), Some(&json!("billing")));
        scopes.extend(served(engine, &thread, "classify").await);
    }
    (scopes.len(), scopes)
}

#[tokio::test(start_paused = true)]
async fn a_node_scoped_paladin_hits_after_every_unrelated_edit() {
    for edit in EDITS {
        let llm = MockLlmAdapter::new().with_default_response("billing");
        let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
        let engine = llm_engine(&llm, &cache);
        let node = || classifier("Classify: {ticket}", "gpt-4o");
        let before = triage(node(), CacheScope::Node, Edit::Nothing);
        let after = triage(node(), CacheScope::Node, edit);
        assert_ne!(
            before.fingerprint(),
            after.fingerprint(),
            "{edit:?} is an edit"
        );

        assert_eq!(triage_run(&engine, &before, "before").await.0, 0);
        assert_eq!(llm.call_count(), 3);
        let (hits, scopes) = triage_run(&engine, &after, "after").await;
        assert_eq!(hits, 3, "{edit:?}: every ticket served from the cache");
        assert_eq!(llm.call_count(), 3, "{edit:?}: no LLM call re-sent");
        assert_eq!(
            scopes,
            [CacheScope::Node; 3],
            "the hits say which scope served them"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_graph_scoped_paladin_misses_after_the_same_edits() {
    for edit in EDITS {
        let llm = MockLlmAdapter::new().with_default_response("billing");
        let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
        let engine = llm_engine(&llm, &cache);
        let node = || classifier("Classify: {ticket}", "gpt-4o");
        let before = triage(node(), CacheScope::Graph, Edit::Nothing);
        triage_run(&engine, &before, "before").await;
        // The guide's rule: change the graph's shape and the key changes.
        let after = triage(node(), CacheScope::Graph, edit);
        assert_eq!(triage_run(&engine, &after, "after").await.0, 0, "{edit:?}");
        assert_eq!(llm.call_count(), 6, "{edit:?}");
        // The unedited graph still hits its own entries, and says so.
        let (hits, scopes) = triage_run(&engine, &before, "again").await;
        assert_eq!((hits, llm.call_count()), (3, 6));
        assert_eq!(scopes, [CacheScope::Graph; 3]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_scoped_function_hits_after_every_unrelated_edit() {
    for edit in EDITS {
        for scope in SCOPES {
            let engine = engine().with_node_cache(InMemoryNodeCache::new());
            let node = || {
                NodeSpec::function(
                    FnNode::new("classify", |_, _| {
                        Box::pin(async { Ok(delta(&[("label", json!("billing"))]).into()) })
                    })
                    .with_code_version("1"),
                )
            };
            triage_run(&engine, &triage(node(), scope, Edit::Nothing), "before").await;
            let (hits, _) = triage_run(&engine, &triage(node(), scope, edit), "after").await;
            let expected = if scope == CacheScope::Node { 3 } else { 0 };
            assert_eq!(hits, expected, "{edit:?} in {scope:?} scope");
        }
    }
}

// ---------------------------------------------------------------------------
// Changes to the node itself: a miss in both scopes.

/// `START -> answer -> END` over `question` and `answer`, with `node`
/// (an `#[aegis]` function's marker) cached in `scope`; `extra` adds an
/// unrelated node, so only a node-scoped entry could be shared.
fn answer_graph(node: impl AegisNode, scope: CacheScope, extra: bool) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[
            ("question", LastWrite),
            ("answer", LastWrite),
            ("log", Append),
        ]),
        EngineLimits::default(),
    );
    g.add_aegis_node(node)
        .add_edge(START, "answer")
        .add_edge("answer", END)
        .set_aegis("answer", policy(scope));
    if extra {
        g.add_node("audit", write("log", json!("audited")))
            .add_edge(START, "audit")
            .add_edge("audit", END);
    }
    g
}

#[tokio::test(start_paused = true)]
async fn a_changed_node_body_misses_in_both_scopes() {
    // Same id, same kind, same graph: only the body differs.
    assert_eq!(
        <v1::answer as AegisNodeFn>::KIND,
        <v2::answer as AegisNodeFn>::KIND
    );
    assert_ne!(
        <v1::answer as AegisNodeFn>::CODE_VERSION,
        <v2::answer as AegisNodeFn>::CODE_VERSION
    );
    for scope in SCOPES {
        let engine = engine().with_node_cache(InMemoryNodeCache::new());
        let input = json!({"question": "why?"});
        let g1 = answer_graph(v1::answer {}, scope, false);
        let g2 = answer_graph(v2::answer {}, scope, false);
        // The fingerprint holds no code: a deploy of v2 resumes v1's threads.
        assert_eq!(g1.fingerprint(), g2.fingerprint());

        let first = run_to_state(&engine, &g1, "v1", input.clone()).await;
        assert_eq!(first.get("answer"), Some(&json!("v1 answer to why?")));
        let fixed = run_to_state(&engine, &g2, "v2", input.clone()).await;
        assert_eq!(
            fixed.get("answer"),
            Some(&json!("v2 answer to why?")),
            "{scope:?}: the fixed node must not be served the old answer"
        );
        assert_eq!(served(&engine, "v2", "answer").await, None);
        // Each version still hits its own entry.
        let again = run_to_state(&engine, &g1, "v1-again", input.clone()).await;
        assert_eq!(again, first);
        assert_eq!(served(&engine, "v1-again", "answer").await, Some(scope));
    }
}

#[tokio::test(start_paused = true)]
async fn formatting_and_doc_comments_are_not_a_code_change() {
    assert_eq!(
        <v1::answer as AegisNodeFn>::CODE_VERSION,
        <v1_reformatted::answer as AegisNodeFn>::CODE_VERSION
    );
    for scope in SCOPES {
        let engine = engine().with_node_cache(InMemoryNodeCache::new());
        let input = json!({"question": "why?"});
        run_to_state(
            &engine,
            &answer_graph(v1::answer {}, scope, false),
            "a",
            input.clone(),
        )
        .await;
        let g = answer_graph(v1_reformatted::answer {}, scope, false);
        run_to_state(&engine, &g, "b", input).await;
        assert_eq!(served(&engine, "b", "answer").await, Some(scope));
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_scoped_function_shares_across_graphs_until_its_body_changes() {
    let engine = engine().with_node_cache(InMemoryNodeCache::new());
    let input = json!({"question": "why?"});
    let node = CacheScope::Node;
    run_to_state(
        &engine,
        &answer_graph(v1::answer {}, node, false),
        "a",
        input.clone(),
    )
    .await;
    // Another graph holding the same node: a hit.
    run_to_state(
        &engine,
        &answer_graph(v1::answer {}, node, true),
        "b",
        input.clone(),
    )
    .await;
    assert_eq!(served(&engine, "b", "answer").await, Some(node));
    // The same graph change with the node's body changed too: a miss.
    let state = run_to_state(
        &engine,
        &answer_graph(v2::answer {}, node, true),
        "c",
        input.clone(),
    )
    .await;
    assert_eq!(state.get("answer"), Some(&json!("v2 answer to why?")));
    assert_eq!(served(&engine, "c", "answer").await, None);
}

#[tokio::test(start_paused = true)]
async fn a_changed_prompt_model_or_input_misses_in_both_scopes() {
    for scope in SCOPES {
        let llm = MockLlmAdapter::new().with_default_response("billing");
        let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
        let engine = llm_engine(&llm, &cache);
        let run =
            |template: &str, model: &str| triage(classifier(template, model), scope, Edit::Nothing);
        let ticket = |t: &str| json!({"ticket": t});
        let base = run("Classify: {ticket}", "gpt-4o");
        run_to_state(&engine, &base, "base", ticket("printer on fire")).await;

        let changes = [
            (
                "prompt",
                run("Label this ticket: {ticket}", "gpt-4o"),
                ticket("printer on fire"),
            ),
            (
                "model",
                run("Classify: {ticket}", "gpt-4o-mini"),
                ticket("printer on fire"),
            ),
            (
                "input",
                run("Classify: {ticket}", "gpt-4o"),
                ticket("printer in flames"),
            ),
        ];
        for (i, (what, graph, input)) in changes.into_iter().enumerate() {
            let thread = what.to_string();
            run_to_state(&engine, &graph, &thread, input).await;
            assert_eq!(
                served(&engine, &thread, "classify").await,
                None,
                "{what} in {scope:?}"
            );
            assert_eq!(
                llm.call_count(),
                2 + i,
                "{what} in {scope:?}: the LLM was called"
            );
        }
        // Nothing changed: a hit.
        run_to_state(&engine, &base, "same", ticket("printer on fire")).await;
        assert_eq!(served(&engine, "same", "classify").await, Some(scope));
        assert_eq!(llm.call_count(), 4);
    }
}

/// `classify` as a closure node of code version `version`.
fn versioned(version: &str) -> NodeSpec {
    NodeSpec::function(
        FnNode::new("classify", |_, _| {
            Box::pin(async { Ok(delta(&[("label", json!("billing"))]).into()) })
        })
        .with_code_version(version),
    )
}

#[tokio::test(start_paused = true)]
async fn a_builder_node_s_code_version_is_its_code() {
    for scope in SCOPES {
        let engine = engine().with_node_cache(InMemoryNodeCache::new());
        let input = json!({"ticket": "printer on fire"});
        let g1 = triage(versioned("1"), scope, Edit::Nothing);
        let g2 = triage(versioned("2"), scope, Edit::Nothing);
        assert_eq!(
            g1.fingerprint(),
            g2.fingerprint(),
            "not part of the fingerprint"
        );
        run_to_state(&engine, &g1, "v1", input.clone()).await;
        run_to_state(&engine, &g2, "v2", input.clone()).await;
        assert_eq!(served(&engine, "v2", "classify").await, None, "{scope:?}");
        run_to_state(&engine, &g2, "v2-again", input.clone()).await;
        assert_eq!(served(&engine, "v2-again", "classify").await, Some(scope));
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_scoped_function_without_a_code_version_is_refused() {
    let unversioned = NodeSpec::from_fn("classify", |_, _| {
        Box::pin(async { Ok(delta(&[("label", json!("billing"))]).into()) })
    });
    let engine = engine().with_node_cache(InMemoryNodeCache::new());
    let g = triage(unversioned.clone(), CacheScope::Node, Edit::Nothing);
    let err = engine
        .start(&g, "t", json!({"ticket": "x"}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::CacheScopeWithoutCodeVersion {
            nodes: vec![NodeId::new("classify")]
        }
    );
    assert!(
        err.to_string().contains("FnNode::with_code_version"),
        "{err}"
    );
    // Graph-scoped, as the guide has it, it needs none.
    let g = triage(unversioned, CacheScope::Graph, Edit::Nothing);
    run_to_state(&engine, &g, "t", json!({"ticket": "x"})).await;
}

#[tokio::test(start_paused = true)]
async fn node_scope_prefix_drops_a_node_s_node_scoped_entries() {
    let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    let engine = engine().with_node_cache(cache.clone());
    let input = json!({"ticket": "x"});
    let g = triage(versioned("1"), CacheScope::Node, Edit::Nothing);
    run_to_state(&engine, &g, "a", input.clone()).await;
    let graph_prefix = CacheKey::graph_prefix(&g.fingerprint());
    assert_eq!(cache.invalidate_prefix(&graph_prefix).await.unwrap(), 0);
    let prefix = CacheKey::node_scope_prefix(&NodeId::new("classify"));
    assert_eq!(cache.invalidate_prefix(&prefix).await.unwrap(), 1);
    run_to_state(&engine, &g, "b", input).await;
    assert_eq!(served(&engine, "b", "classify").await, None);
}

#[test]
fn the_scope_joins_the_fingerprint_only_when_node() {
    let fingerprint = |scope| triage(versioned("1"), scope, Edit::Nothing).fingerprint();
    assert_ne!(
        fingerprint(CacheScope::Graph),
        fingerprint(CacheScope::Node)
    );
    // The default is the policy as it was before scopes existed.
    let graph_scoped = CachePolicy::new(Duration::from_secs(60), CacheKeySpec::Default);
    let serialized = serde_json::to_value(&graph_scoped).unwrap();
    assert!(serialized.get("scope").is_none(), "{serialized}");
    let node_scoped = serde_json::to_value(graph_scoped.with_scope(CacheScope::Node)).unwrap();
    assert_eq!(node_scoped.get("scope"), Some(&json!("node")));
    let back: CachePolicy = serde_json::from_value(serialized).unwrap();
    assert_eq!(back.scope, CacheScope::Graph);
}

// ---------------------------------------------------------------------------
// Namespaces.

/// `lookup` holding `client`, node-scoped by its attribute.
fn tenant_graph(client: TenantClient) -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("question", LastWrite), ("answer", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_aegis_node(lookup::with(client))
        .add_edge(START, "lookup")
        .add_edge("lookup", END);
    g
}

async fn answer_of(
    engine: &WarEngine<InMemoryWaypointStore>,
    graph: &WarGraph,
    thread: &str,
) -> Value {
    let state = run_to_state(engine, graph, thread, json!({"question": "my balance?"})).await;
    state.get("answer").cloned().unwrap_or_default()
}

/// Two engines over `cache`, one per tenant, each running its own client;
/// then a second engine of the first tenant.
async fn two_tenants_over(cache: Arc<dyn NodeCache>) {
    let acme = engine()
        .with_node_cache(cache.clone())
        .with_cache_namespace("acme");
    let globex = engine()
        .with_node_cache(cache.clone())
        .with_cache_namespace("globex");
    let acme_graph = tenant_graph(TenantClient { tenant: "acme" });
    let globex_graph = tenant_graph(TenantClient { tenant: "globex" });
    assert_eq!(acme_graph.fingerprint(), globex_graph.fingerprint());

    assert_eq!(
        answer_of(&acme, &acme_graph, "a").await,
        json!("acme answers my balance?")
    );
    assert_eq!(
        answer_of(&globex, &globex_graph, "g").await,
        json!("globex answers my balance?"),
        "globex's node calls its own client"
    );
    assert_eq!(served(&globex, "g", "lookup").await, None);
    // The same namespace shares: another engine of acme's hits.
    let acme_again = engine()
        .with_node_cache(cache.clone())
        .with_cache_namespace("acme");
    assert_eq!(
        answer_of(&acme_again, &acme_graph, "a2").await,
        json!("acme answers my balance?")
    );
    assert_eq!(
        served(&acme_again, "a2", "lookup").await,
        Some(CacheScope::Node)
    );
    // And an engine with no namespace is a namespace of its own.
    let none = engine().with_node_cache(cache);
    answer_of(&none, &acme_graph, "n").await;
    assert_eq!(served(&none, "n", "lookup").await, None);
}

#[tokio::test(start_paused = true)]
async fn namespaces_keep_tenants_apart_over_one_in_memory_cache() {
    two_tenants_over(Arc::new(InMemoryNodeCache::new())).await;
}

#[tokio::test(start_paused = true)]
async fn without_namespaces_two_clients_share_one_entry() {
    // Why namespaces exist: the instance is not part of any key.
    let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    let engine = engine().with_node_cache(cache);
    answer_of(&engine, &tenant_graph(TenantClient { tenant: "acme" }), "a").await;
    let leaked = answer_of(
        &engine,
        &tenant_graph(TenantClient { tenant: "globex" }),
        "g",
    )
    .await;
    assert_eq!(leaked, json!("acme answers my balance?"));
}

#[tokio::test(start_paused = true)]
async fn namespaces_apply_in_the_graph_scope_too() {
    let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    let g = answer_graph(v1::answer {}, CacheScope::Graph, false);
    let input = json!({"question": "why?"});
    let a = engine()
        .with_node_cache(cache.clone())
        .with_cache_namespace("a");
    let b = engine()
        .with_node_cache(cache.clone())
        .with_cache_namespace("b");
    let a2 = engine().with_node_cache(cache).with_cache_namespace("a");
    run_to_state(&a, &g, "t", input.clone()).await;
    run_to_state(&b, &g, "t", input.clone()).await;
    assert_eq!(served(&b, "t", "answer").await, None);
    run_to_state(&a2, &g, "t", input).await;
    assert_eq!(served(&a2, "t", "answer").await, Some(CacheScope::Graph));
}

#[tokio::test(start_paused = true)]
async fn an_empty_namespace_is_refused() {
    let engine = engine()
        .with_node_cache(InMemoryNodeCache::new())
        .with_cache_namespace("");
    let g = tenant_graph(TenantClient { tenant: "acme" });
    let err = engine.start(&g, "t", json!({})).await.unwrap_err();
    assert_eq!(
        err,
        EngineError::EmptyCacheNamespace {
            nodes: vec![NodeId::new("lookup")]
        }
    );
    assert!(err.to_string().contains("namespace is empty"), "{err}");
    // A graph that caches nothing has nothing to keep apart.
    let plain = chain(
        schema(&[("n", LastWrite)]),
        vec![("w", write("n", json!(1)))],
    );
    run_to_state(&engine, &plain, "p", json!({})).await;
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn namespaces_keep_tenants_apart_over_one_real_redis() {
    // Two connections with one key prefix: two processes sharing a Redis.
    let prefix = format!("aegis-test:namespaces:{}", std::process::id());
    let connect = || async {
        RedisNodeCache::connect("redis://127.0.0.1:6379", prefix.clone())
            .await
            .expect("Redis must be running on 127.0.0.1:6379 for the redis-cache tests")
    };
    let first = connect().await;
    first.invalidate_all().await.unwrap();
    let acme: Arc<dyn NodeCache> = Arc::new(first);
    let acme_engine = engine()
        .with_node_cache(acme.clone())
        .with_cache_namespace("acme");
    let globex_engine = engine()
        .with_node_cache(connect().await)
        .with_cache_namespace("globex");
    let acme_graph = tenant_graph(TenantClient { tenant: "acme" });
    let globex_graph = tenant_graph(TenantClient { tenant: "globex" });

    assert_eq!(
        answer_of(&acme_engine, &acme_graph, "a").await,
        json!("acme answers my balance?")
    );
    assert_eq!(
        answer_of(&globex_engine, &globex_graph, "g").await,
        json!("globex answers my balance?")
    );
    assert_eq!(served(&globex_engine, "g", "lookup").await, None);
    // Both entries are in the one Redis, under one prefix.
    let stored = acme.invalidate_prefix("").await.unwrap();
    assert_eq!(stored, 2, "one entry per tenant");
    // Stored again, then read by a third connection in acme's namespace.
    answer_of(&acme_engine, &acme_graph, "a2").await;
    let acme_again = engine()
        .with_node_cache(connect().await)
        .with_cache_namespace("acme");
    assert_eq!(
        answer_of(&acme_again, &acme_graph, "a3").await,
        json!("acme answers my balance?")
    );
    assert_eq!(
        served(&acme_again, "a3", "lookup").await,
        Some(CacheScope::Node)
    );
    acme.invalidate_all().await.unwrap();
}

#[cfg(feature = "redis-cache")]
#[tokio::test]
async fn the_shared_tenant_scenario_holds_over_real_redis() {
    let prefix = format!("aegis-test:tenants:{}", std::process::id());
    let cache = RedisNodeCache::connect("redis://127.0.0.1:6379", prefix)
        .await
        .expect("Redis must be running on 127.0.0.1:6379 for the redis-cache tests");
    cache.invalidate_all().await.unwrap();
    let cache: Arc<dyn NodeCache> = Arc::new(cache);
    two_tenants_over(cache.clone()).await;
    cache.invalidate_all().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_worker_pool_can_pick_each_run_s_namespace_from_its_lease() {
    use aegis::worker::{Client, InMemoryRunQueue, RunQueue, RunState, WorkerConfig, WorkerPool};
    use std::sync::atomic::Ordering;

    let runs = counter();
    let node_runs = runs.clone();
    let node = NodeSpec::function(
        FnNode::new("classify", move |_, _| {
            node_runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(delta(&[("label", json!("billing"))]).into()) })
        })
        .with_code_version("1"),
    );
    let graph = triage(node, CacheScope::Node, Edit::Nothing);
    let cache: Arc<dyn NodeCache> = Arc::new(InMemoryNodeCache::new());
    let q: Arc<dyn RunQueue> = Arc::new(InMemoryRunQueue::new());
    // Threads are named `{tenant}.{n}`: the engine of each run takes the
    // tenant from its lease as its namespace, so a resumed thread keeps it.
    let pool = WorkerPool::new(q.clone(), move |store| {
        let tenant = store
            .lease()
            .thread_id
            .split_once('.')
            .map(|(tenant, _)| tenant.to_string())
            .unwrap_or_default();
        WarEngine::new(store)
            .with_node_cache(cache.clone())
            .with_cache_namespace(tenant)
    })
    .with_config(WorkerConfig::default().with_poll_interval(Duration::from_millis(10)))
    .register("triage", graph)
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(pool.run(stop.clone()));
    let client = Client::new(q);
    let mut executions = Vec::new();
    for thread in ["acme.1", "globex.1", "acme.2", "globex.2"] {
        client
            .submit("triage", thread, json!({"ticket": "printer on fire"}))
            .await
            .unwrap();
        let status = client.wait(thread, Duration::from_secs(5)).await.unwrap();
        assert_eq!(status.state, RunState::Completed, "{status:?}");
        executions.push(runs.load(Ordering::SeqCst));
    }
    // Each tenant's first run executes; its second is served its own entry.
    assert_eq!(executions, [1, 2, 2, 2]);
    stop.cancel();
    running.await.unwrap().unwrap();
}
