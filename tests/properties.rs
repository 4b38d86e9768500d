//! Property tests of the engine's deterministic core: merge order, the
//! backoff schedule, cache keys and graph fingerprints.
//!
//! (`map_http_status` and both SSE parsers are property-tested in
//! `llm_props.rs`; the macro duration parser in `aegis-macros`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use aegis::cache::CacheKey;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use aegis_runtime::__internal::Writer;
use aegis_runtime::__internal::derive_key;
use aegis_runtime::__internal::initial_state;
use aegis_runtime::__internal::merge;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{field, field_name};

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Merge determinism: any completion order gives the same state.

/// A fan-out of `writes.len()` nodes under one join; node `i` finishes after
/// `finish_ms[i]` and writes to every dispatch rule but LastWrite, plus its
/// own LastWrite field.
fn fan_out(writes: &[(i64, String)], finish_ms: &[u64]) -> WarGraph {
    let mut fields = vec![
        field("log", DispatchRule::Append),
        field("total", DispatchRule::Sum),
        field("obj", DispatchRule::Merge),
        field("joined", DispatchRule::LastWrite),
    ];
    fields.extend((0..writes.len()).map(|i| field(&format!("own{i}"), DispatchRule::LastWrite)));
    let mut g = WarGraph::new(
        BattlefieldSchema::new(fields),
        EngineLimits::default().with_max_concurrency(64),
    );
    g.add_node(
        "join",
        NodeSpec::from_fn("join", |state, _| {
            let seen = state.get("log").cloned().unwrap_or(Value::Null);
            Box::pin(async move {
                let mut d = StateDelta::new();
                d.set("joined", seen)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge("join", END);
    for (i, ((n, s), ms)) in writes.iter().zip(finish_ms).enumerate() {
        let (n, s, ms) = (*n, s.clone(), *ms);
        let id = format!("w{i}");
        let key = format!("k{}", i % 3);
        g.add_node(
            id.as_str(),
            NodeSpec::from_fn("writer", move |_, _| {
                let (s, key) = (s.clone(), key.clone());
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let mut d = StateDelta::new();
                    d.set("log", json!([s, n]))?
                        .set("total", n)?
                        .set("obj", json!({ key: s }))?
                        .set(format!("own{i}").as_str(), n)?;
                    Ok(d.into())
                })
            }),
        );
        g.add_edge(START, id.as_str()).add_edge(id.as_str(), "join");
    }
    g
}

fn run_to_state(graph: &WarGraph) -> Battlefield {
    paused_runtime().block_on(async {
        let engine = WarEngine::new(InMemoryWaypointStore::new());
        engine
            .start(graph, "t", json!({}))
            .await
            .unwrap()
            .into_result()
            .unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_is_the_same_whatever_order_nodes_finish_in(
        writes in prop::collection::vec((-1000i64..1000, "[a-z]{0,4}"), 2..10),
        order_a in Just((0..10u64).collect::<Vec<_>>()).prop_shuffle(),
        order_b in Just((0..10u64).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        // Distinct finishing instants in two random permutations: the nodes
        // complete in two different orders.
        let ms = |order: &[u64]| order.iter().map(|o| o * 10).collect::<Vec<_>>();
        let a = run_to_state(&fan_out(&writes, &ms(&order_a)));
        let b = run_to_state(&fan_out(&writes, &ms(&order_b)));
        prop_assert_eq!(&a, &b);
        // ... and both equal merging in vanguard (node id) order.
        let mut ids: Vec<(String, usize)> = (0..writes.len()).map(|i| (format!("w{i}"), i)).collect();
        ids.sort();
        let log: Vec<Value> = ids.iter().flat_map(|(_, i)| [json!(writes[*i].1), json!(writes[*i].0)]).collect();
        prop_assert_eq!(a.get("log"), Some(&Value::Array(log.clone())));
        prop_assert_eq!(a.get("joined"), Some(&Value::Array(log)));
        let total: i64 = writes.iter().map(|w| w.0).sum();
        prop_assert_eq!(a.get("total"), Some(&json!(total)));
    }
}

// ---------------------------------------------------------------------------
// The backoff schedule.

fn policy() -> impl Strategy<Value = RetryPolicy> {
    (0u64..20_000, 1.0f64..6.0, 0u64..120_000, any::<bool>()).prop_map(
        |(initial_ms, factor, extra_ms, jitter)| {
            RetryPolicy::default()
                .with_max_attempts(64)
                .with_initial_interval(Duration::from_millis(initial_ms))
                .with_backoff_factor(factor)
                .with_max_interval(Duration::from_millis(initial_ms + extra_ms))
                .with_jitter(jitter)
                .with_retry_on(RetryPredicate::TransientOnly)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn base_delays_grow_until_the_cap_and_stay_there(p in policy()) {
        let delays: Vec<Duration> = (2..=64).map(|n| p.base_delay(n)).collect();
        prop_assert_eq!(delays[0], p.initial_interval.min(p.max_interval));
        for w in delays.windows(2) {
            prop_assert!(w[0] <= w[1], "not non-decreasing: {:?}", delays);
        }
        prop_assert!(delays.iter().all(|d| *d <= p.max_interval));
        // Once capped, capped for good; before the cap, the formula.
        if let Some(first_cap) = delays.iter().position(|d| *d == p.max_interval) {
            prop_assert!(delays[first_cap..].iter().all(|d| *d == p.max_interval));
        }
        for (i, d) in delays.iter().enumerate() {
            let exact = p.initial_interval.as_secs_f64() * p.backoff_factor.powi(i as i32);
            if exact < p.max_interval.as_secs_f64() {
                prop_assert!((d.as_secs_f64() - exact).abs() <= 1e-6 * exact.max(1.0));
            }
        }
        prop_assert_eq!(p.base_delay(1), Duration::ZERO);
    }

    #[test]
    fn jittered_delays_lie_in_d_to_2d(p in policy(), seed in any::<u64>(), attempt in 2u32..40) {
        let mut rng = StdRng::seed_from_u64(seed);
        let d = p.base_delay(attempt);
        for _ in 0..32 {
            let got = p.delay_before(attempt, &mut rng);
            if !p.jitter || d.is_zero() {
                prop_assert_eq!(got, d);
            } else {
                prop_assert!(got >= d && got < d * 2, "{got:?} outside [{d:?}, {:?})", d * 2);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Cache keys.

/// Every component a node cache key is made of.
#[derive(Debug, Clone)]
struct KeyInputs {
    fingerprint: String,
    node: String,
    paladin: bool,
    model: String,
    system: String,
    temperature: f32,
    question: String,
    other: i64,
    fields: bool,
    task: Option<(String, i64)>,
}

fn key_inputs() -> impl Strategy<Value = KeyInputs> {
    (
        "v6:[0-9a-f]{8}",
        "[a-z]{1,8}",
        any::<bool>(),
        "[a-z0-9-]{1,10}",
        "[ -~]{0,20}",
        0u8..=20,
        "[ -~]{0,20}",
        any::<i64>(),
        any::<bool>(),
        proptest::option::of(("[a-z0-9]{0,6}", any::<i64>())),
    )
        .prop_map(
            |(fingerprint, node, paladin, model, system, t, question, other, fields, task)| {
                KeyInputs {
                    fingerprint,
                    node,
                    paladin,
                    model,
                    system,
                    temperature: f32::from(t) / 10.0,
                    question,
                    other,
                    fields,
                    task,
                }
            },
        )
}

fn key_of(k: &KeyInputs) -> CacheKey {
    let schema = BattlefieldSchema::new(vec![
        field("question", DispatchRule::LastWrite),
        field("other", DispatchRule::LastWrite),
        field("answer", DispatchRule::LastWrite),
    ]);
    let state = initial_state(&schema, &json!({"question": k.question, "other": k.other})).unwrap();
    let spec = if k.paladin {
        NodeSpec::paladin(
            Paladin::new("agent")
                .with_model(k.model.as_str())
                .with_system_prompt(k.system.as_str())
                .with_temperature(k.temperature),
            InputMapping::new("Answer: {question}"),
            FieldName::new("answer").unwrap(),
        )
    } else {
        NodeSpec::from_fn("noop", |_, _| {
            Box::pin(async { Ok(StateDelta::new().into()) })
        })
    };
    let key_spec = if k.fields {
        CacheKeySpec::Fields(vec![FieldName::new("other").unwrap()])
    } else {
        CacheKeySpec::Default
    };
    let payload = k.task.as_ref().map(|(_, p)| json!(p));
    let task = k
        .task
        .as_ref()
        .map(|(key, _)| key.as_str())
        .zip(payload.as_ref());
    derive_key(
        &k.fingerprint,
        &NodeId::new(k.node.as_str()),
        &spec,
        &key_spec,
        &state,
        task,
    )
    .unwrap()
}

/// `k` with exactly one component changed, among those the key must see
/// for this node kind and key spec; `None` when `which` names one it does
/// not cover (a Function node's model, say).
fn mutate(k: &KeyInputs, which: usize) -> Option<KeyInputs> {
    let mut m = k.clone();
    match which % 9 {
        0 => m.fingerprint.push('0'),
        1 => m.node.push('x'),
        2 if k.paladin => m.model.push('x'),
        3 if k.paladin => m.system.push('x'),
        4 if k.paladin => m.temperature += 0.05,
        // The rendered prompt (Paladin) or the snapshot (Function, Default).
        5 if k.paladin || !k.fields => m.question.push('?'),
        // A named field (Fields) or part of the snapshot (Function, Default).
        6 if k.fields || !k.paladin => m.other = m.other.wrapping_add(1),
        7 => {
            m.task = match &k.task {
                None => Some((String::new(), 0)),
                Some((key, p)) => Some((format!("{key}'"), *p)),
            }
        }
        8 => {
            m.task = match &k.task {
                None => Some((String::new(), 1)),
                Some((key, p)) => Some((key.clone(), p.wrapping_add(1))),
            }
        }
        _ => return None,
    }
    Some(m)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn equal_inputs_give_equal_keys(k in key_inputs()) {
        prop_assert_eq!(key_of(&k), key_of(&k.clone()));
    }

    #[test]
    fn any_single_changed_component_changes_the_key(k in key_inputs(), which in 0usize..9) {
        if let Some(m) = mutate(&k, which) {
            prop_assert_ne!(key_of(&k), key_of(&m), "component {} did not reach the key", which);
        }
    }
}

// ---------------------------------------------------------------------------
// Cache keys over evolving snapshots: each stored value's digest is memoised
// on the snapshot and shared by later ones, and must give exactly the key
// hashing the values afresh gives.

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One superstep's writes: `(field, value)` pairs fitting each field's rule.
fn step() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    prop::collection::vec(
        prop_oneof![
            json_value().prop_map(|v| ("last", v)),
            json_value().prop_map(|v| ("log", v)),
            (-1000i64..1000).prop_map(|n| ("total", Value::from(n))),
            prop::collection::btree_map("[a-c]", json_value(), 0..3)
                .prop_map(|m| ("obj", Value::Object(m.into_iter().collect()))),
        ],
        0..4,
    )
}

/// `v` spelled otherwise: integers as floats where exact, object keys
/// inserted in reverse (the order a `preserve_order` map would keep).
fn respelled(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i.unsigned_abs() < (1 << 53) => json!(i as f64),
            _ => v.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(respelled).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), respelled(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn memoised_keys_equal_keys_of_the_same_values_afresh(
        initial_log in prop::collection::vec(json_value(), 0..3),
        steps in prop::collection::vec(step(), 1..6),
        task in proptest::option::of(("[a-z]{0,3}", json_value())),
    ) {
        let schema = BattlefieldSchema::new(vec![
            field("last", DispatchRule::LastWrite),
            field("log", DispatchRule::Append),
            field("total", DispatchRule::Sum),
            field("obj", DispatchRule::Merge),
        ]);
        let node = NodeId::new("n");
        let spec = NodeSpec::from_fn("n", |_, _| Box::pin(async { Ok(StateDelta::new().into()) }));
        let specs = [
            CacheKeySpec::Default,
            CacheKeySpec::Fields(vec![field_name("log"), field_name("obj"), field_name("last")]),
        ];
        let task = task.as_ref().map(|(k, p)| (k.as_str(), p));
        let key = |state: &Battlefield, key: &CacheKeySpec| {
            derive_key("v7:props", &node, &spec, key, state, task).unwrap()
        };
        let mut state = initial_state(&schema, &json!({"log": initial_log})).unwrap();
        for writes in steps {
            let mut delta = StateDelta::new();
            for (f, v) in &writes {
                delta.set(*f, v).unwrap();
            }
            // Keys of the older snapshot first, so the newer one shares
            // whatever digests it did not rewrite.
            let before: Vec<CacheKey> = specs.iter().map(|k| key(&state, k)).collect();
            let older = state.clone();
            state = merge(&schema, &state, [(Writer::node("w"), &delta)]).unwrap();
            let restored: Battlefield =
                serde_json::from_value(serde_json::to_value(&state).unwrap()).unwrap();
            let respelled_state = initial_state(&schema, &respelled(&state.to_json())).unwrap();
            for (k, old) in specs.iter().zip(&before) {
                let memoised = key(&state, k);
                prop_assert_eq!(&memoised, &key(&state, k));
                prop_assert_eq!(&memoised, &key(&restored, k));
                prop_assert_eq!(&memoised, &key(&respelled_state, k));
                // The key changed exactly when a keyed value did.
                let keyed: &[&str] = match k {
                    CacheKeySpec::Default => &["last", "log", "total", "obj"],
                    _ => &["last", "log", "obj"],
                };
                let changed = keyed.iter().any(|f| older.get(f) != state.get(f));
                prop_assert_eq!(changed, &memoised != old);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Fingerprints.

#[derive(Debug, Clone)]
struct Shape {
    nodes: usize,
    edges: Vec<(usize, usize)>,
    conditional: Vec<(usize, Vec<usize>)>,
    dynamic: Vec<usize>,
    routes: Vec<(usize, usize)>,
    cached: Vec<usize>,
}

fn shape() -> impl Strategy<Value = Shape> {
    (2usize..12).prop_flat_map(|n| {
        (
            Just(n),
            prop::collection::vec((0..n, 0..n), 1..24),
            prop::collection::vec((0..n, prop::collection::vec(0..n, 1..4)), 0..4),
            prop::collection::vec(0..n, 0..3),
            prop::collection::vec((0..n, 0..n), 0..3),
            prop::collection::vec(0..n, 0..3),
        )
            .prop_map(
                |(nodes, edges, conditional, dynamic, routes, cached)| Shape {
                    nodes,
                    edges,
                    conditional,
                    dynamic,
                    routes,
                    cached,
                },
            )
    })
}

/// Builds `s` adding nodes, edges, conditional edges, dynamic targets and
/// Aegis entries in the orders given by the permutations.
fn build(s: &Shape, node_order: &[usize], edge_order: &[usize], reverse_rest: bool) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![
        field("x", DispatchRule::LastWrite),
        field("err", DispatchRule::Append),
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let id = |i: usize| format!("n{i}");
    for &i in node_order.iter().filter(|&&i| i < s.nodes) {
        let spec = if i % 3 == 0 {
            NodeSpec::paladin(
                Paladin::new("p").with_model("m"),
                InputMapping::new("{x}"),
                FieldName::new("x").unwrap(),
            )
        } else {
            NodeSpec::from_fn("f", |_, _| Box::pin(async { Ok(StateDelta::new().into()) }))
        };
        g.add_node(id(i).as_str(), spec);
    }
    g.add_edge(START, "n0");
    for &e in edge_order.iter().filter(|&&e| e < s.edges.len()) {
        let (a, b) = s.edges[e];
        g.add_edge(id(a).as_str(), id(b).as_str());
    }
    let mut conditional: Vec<(usize, String, Vec<usize>)> = s
        .conditional
        .iter()
        .enumerate()
        .map(|(i, (from, targets))| (*from, format!("e{i}"), targets.clone()))
        .collect();
    let mut dynamic = s.dynamic.clone();
    let mut aegis: Vec<(usize, Aegis)> = s
        .routes
        .iter()
        .map(|&(a, to)| {
            (
                a,
                Aegis::new().with_on_error(ErrorHandlerSpec::Route {
                    to: NodeId::new(id(to).as_str()),
                    error_field: FieldName::new("err").unwrap(),
                }),
            )
        })
        .collect();
    aegis.extend(s.cached.iter().map(|&c| {
        (
            c,
            Aegis::new().with_cache(CachePolicy::new(
                Duration::from_secs(60),
                CacheKeySpec::Default,
            )),
        )
    }));
    // set_aegis replaces: keep the last entry per node in either order.
    let mut last: std::collections::BTreeMap<usize, Aegis> = Default::default();
    for (n, a) in aegis {
        last.insert(n, a);
    }
    let mut aegis: Vec<(usize, Aegis)> = last.into_iter().collect();
    if reverse_rest {
        conditional.reverse();
        dynamic.reverse();
        aegis.reverse();
        for (_, _, targets) in &mut conditional {
            targets.reverse();
        }
    }
    for (from, name, targets) in conditional {
        let targets: Vec<String> = targets.iter().map(|&t| id(t)).collect();
        g.add_conditional_edges(id(from).as_str(), name, targets.iter().map(String::as_str));
    }
    for d in dynamic {
        g.mark_dynamic_target(id(d).as_str());
    }
    for (n, a) in aegis {
        g.set_aegis(id(n).as_str(), a);
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn builder_order_does_not_change_the_fingerprint(
        s in shape(),
        nodes_a in Just((0..12usize).collect::<Vec<_>>()).prop_shuffle(),
        nodes_b in Just((0..12usize).collect::<Vec<_>>()).prop_shuffle(),
        edges_b in Just((0..24usize).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        let in_order: Vec<usize> = (0..24).collect();
        let a = build(&s, &nodes_a, &in_order, false);
        let b = build(&s, &nodes_b, &edges_b, true);
        prop_assert_eq!(a.fingerprint(), b.fingerprint());

        // ... while a real change does change it.
        let mut changed = s.clone();
        changed.edges.push((s.nodes - 1, 0));
        changed.edges.push((0, s.nodes - 1));
        let has = |e: (usize, usize)| s.edges.contains(&e);
        if !has((s.nodes - 1, 0)) || !has((0, s.nodes - 1)) {
            let c = build(&changed, &nodes_a, &(0..26).collect::<Vec<_>>(), false);
            prop_assert_ne!(a.fingerprint(), c.fingerprint());
        }
    }
}
