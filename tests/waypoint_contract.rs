//! The contract every `WaypointStore` keeps, run against each store: the
//! in-memory one, SQLite, PostgreSQL (feature `postgres`, against the
//! test server at 127.0.0.1:5432, each test in its own schema), and a store
//! written outside the crates from the public trait alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::stores;

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use aegis::{
    error::{EngineError, StoreError},
    id::{MAX_THREAD_ID_BYTES, ThreadIdError},
    waypoint::{
        Activation, Chronicle, InMemoryWaypointStore, Waypoint, WaypointStatus, WaypointStore,
    },
};
use aegis_runtime::__internal::{Writer, initial_state, merge};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Every public field of a waypoint, for comparison.
fn view(w: &Waypoint) -> Value {
    serde_json::to_value(w).unwrap()
}

fn state(value: Value) -> Battlefield {
    serde_json::from_value(value).unwrap()
}

fn waypoint(thread: &str, seq: u64, state: Battlefield) -> Waypoint {
    let mut w = Waypoint::new(thread, seq, WaypointStatus::Running, state)
        .with_visits([(NodeId::new("next"), seq as u32)]);
    w.superstep = seq as u32;
    w.vanguard = vec![Activation::node("next")].into();
    w.fingerprint = "fingerprint-v1".into();
    // Whole microseconds: some databases keep no more, and the store must
    // hand back exactly what it was given.
    w.created_at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456 + seq);
    w
}

fn schema() -> BattlefieldSchema {
    let f = |n: &str, d| FieldSpec::new(FieldName::new(n).unwrap(), d, None, false);
    BattlefieldSchema::new(vec![
        f("title", DispatchRule::LastWrite),
        f("log", DispatchRule::Append),
        f("total", DispatchRule::Sum),
        f("meta", DispatchRule::Merge),
        f("blob", DispatchRule::LastWrite),
    ])
}

/// The state after one superstep's writes, as the engine would merge them.
fn superstep(base: &Battlefield, writes: Value) -> Battlefield {
    let mut delta = StateDelta::new();
    for (k, v) in writes.as_object().unwrap() {
        delta.set(k.as_str(), v).unwrap();
    }
    merge(&schema(), base, [(Writer::node("n"), &delta)]).unwrap()
}

/// The contract, one function per rule, generic over the store.
mod suite {
    use super::*;

    pub(super) async fn an_unknown_thread_is_empty<S: WaypointStore>(store: Arc<S>) {
        assert!(store.latest("nobody").await.unwrap().is_none());
        assert!(store.history("nobody").await.unwrap().is_empty());
    }

    pub(super) async fn history_is_every_waypoint_in_order<S: WaypointStore>(store: Arc<S>) {
        let s0 = initial_state(&schema(), &json!({"title": "t"})).unwrap();
        let s1 = superstep(&s0, json!({"log": "a", "total": 1}));
        let s2 = superstep(&s1, json!({"log": ["b", "c"], "meta": {"k": 1}}));
        let s3 = superstep(&s2, json!({"title": "retitled", "meta": {"j": 2}}));
        let mut written = Vec::new();
        for (seq, s) in [s0, s1, s2, s3].into_iter().enumerate() {
            let mut w = waypoint("ordered", seq as u64, s);
            if seq == 3 {
                w.status = WaypointStatus::Completed;
                w.vanguard = Vec::new().into();
            }
            store.put(w.clone()).await.unwrap();
            written.push(w);
            let latest = store.latest("ordered").await.unwrap().unwrap();
            assert_eq!(view(&latest), view(written.last().unwrap()));
        }
        let history = store.history("ordered").await.unwrap();
        assert_eq!(
            history.iter().map(view).collect::<Vec<_>>(),
            written.iter().map(view).collect::<Vec<_>>()
        );
        assert_eq!(
            history.last().unwrap().state.get("log"),
            Some(&json!(["a", "b", "c"]))
        );
    }

    pub(super) async fn a_write_must_follow_the_last_waypoint<S: WaypointStore>(store: Arc<S>) {
        let conflict = |expected_seq, actual_next| StoreError::Conflict {
            thread_id: "strict".to_string(),
            expected_seq,
            actual_next,
        };
        let first = waypoint("strict", 0, state(json!({"v": 0})));
        // A thread starts at #0.
        assert_eq!(
            store
                .put(waypoint("strict", 1, state(json!({}))))
                .await
                .unwrap_err(),
            conflict(1, 0)
        );
        store.put(first.clone()).await.unwrap();
        // Neither an earlier nor a later position is accepted ...
        assert_eq!(
            store
                .put(waypoint("strict", 0, state(json!({"v": "again"}))))
                .await
                .unwrap_err(),
            conflict(0, 1)
        );
        assert_eq!(
            store
                .put(waypoint("strict", 2, state(json!({"v": 2}))))
                .await
                .unwrap_err(),
            conflict(2, 1)
        );
        // ... and a refused write leaves nothing behind.
        let history = store.history("strict").await.unwrap();
        assert_eq!(history.iter().map(view).collect::<Vec<_>>(), [view(&first)]);
        // The engine reports the loser as a concurrent update.
        assert!(matches!(
            EngineError::from(conflict(0, 1)),
            EngineError::ConcurrentUpdate { thread_id } if thread_id == "strict"
        ));
    }

    pub(super) async fn of_racing_writers_exactly_one_wins<S: WaypointStore>(store: Arc<S>) {
        store
            .put(waypoint("race", 0, state(json!({"winner": null}))))
            .await
            .unwrap();
        for seq in 1..=3u64 {
            let attempts = (0..8).map(|writer| {
                let store = store.clone();
                tokio::spawn(async move {
                    let s = state(json!({"winner": writer, "round": seq}));
                    (writer, store.put(waypoint("race", seq, s)).await)
                })
            });
            let results: Vec<_> = futures::future::join_all(attempts)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let winners: Vec<u64> = results
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(w, _)| *w)
                .collect();
            assert_eq!(winners.len(), 1, "round {seq}: {results:?}");
            for (_, r) in &results {
                if let Err(e) = r {
                    assert!(
                        matches!(e, StoreError::Conflict { expected_seq, .. } if *expected_seq == seq),
                        "{e:?}"
                    );
                }
            }
            let latest = store.latest("race").await.unwrap().unwrap();
            assert_eq!(latest.seq, seq);
            assert_eq!(latest.state.get("winner"), Some(&json!(winners[0])));
        }
        assert_eq!(store.history("race").await.unwrap().len(), 4);
    }

    pub(super) async fn threads_are_independent<S: WaypointStore>(store: Arc<S>) {
        for seq in 0..5u64 {
            for thread in ["left", "right", "centre"] {
                let s = state(json!({"thread": thread, "seq": seq}));
                store.put(waypoint(thread, seq, s)).await.unwrap();
            }
        }
        for thread in ["left", "right", "centre"] {
            let history = store.history(thread).await.unwrap();
            let seen: Vec<Value> = history.iter().map(|w| w.state.to_json()).collect();
            let expected: Vec<Value> = (0..5)
                .map(|seq| json!({"thread": thread, "seq": seq}))
                .collect();
            assert_eq!(seen, expected);
            assert!(history.iter().all(|w| w.thread_id == thread));
        }
    }

    pub(super) async fn chronicle_forks_a_thread<S: WaypointStore>(store: Arc<S>) {
        let mut s = initial_state(&schema(), &json!({})).unwrap();
        let mut original = Vec::new();
        for seq in 0..5u64 {
            s = superstep(&s, json!({"log": seq, "total": 1}));
            let w = waypoint("trunk", seq, s.clone());
            store.put(w.clone()).await.unwrap();
            original.push(w);
        }
        let chronicle = Chronicle::new(store.clone());
        let tip = chronicle.fork("trunk", 2, "branch").await.unwrap();
        assert_eq!(tip.seq, 2);
        assert_eq!(tip.thread_id, "branch");
        let branch = chronicle.history("branch").await.unwrap();
        assert_eq!(branch.len(), 3);
        for (b, o) in branch.iter().zip(&original) {
            let mut renamed = o.clone();
            renamed.thread_id = "branch".into();
            assert_eq!(view(b), view(&renamed));
        }
        // The branch goes its own way; the trunk is untouched.
        let diverged = superstep(&branch[2].state, json!({"log": "branch only"}));
        store
            .put(waypoint("branch", 3, diverged.clone()))
            .await
            .unwrap();
        assert_eq!(
            store.latest("branch").await.unwrap().unwrap().state,
            diverged
        );
        assert_eq!(store.history("trunk").await.unwrap().len(), 5);
        assert_eq!(
            view(&store.latest("trunk").await.unwrap().unwrap()),
            view(&original[4])
        );
        // Forking onto an existing thread, past the end, or from nothing fails.
        assert!(matches!(
            chronicle.fork("trunk", 1, "branch").await,
            Err(EngineError::ThreadAlreadyExists { thread_id }) if thread_id == "branch"
        ));
        assert!(matches!(
            chronicle.fork("trunk", 5, "twig").await,
            Err(EngineError::WaypointNotFound { seq: 5, .. })
        ));
        assert!(matches!(
            chronicle.fork("nowhere", 0, "twig").await,
            Err(EngineError::ThreadNotFound { .. })
        ));
        assert!(store.history("twig").await.unwrap().is_empty());
    }

    pub(super) async fn a_10_mb_state_round_trips<S: WaypointStore>(store: Arc<S>) {
        let big: String = (0..10 * 1024 * 1024)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let s0 = initial_state(
            &schema(),
            &json!({"blob": big, "log": (0..1000).collect::<Vec<_>>()}),
        )
        .unwrap();
        let s1 = superstep(&s0, json!({"title": "small change", "log": 1000}));
        let other: String = big.chars().rev().collect();
        let s2 = superstep(&s1, json!({"blob": other}));
        let written: Vec<Waypoint> = [s0, s1, s2]
            .into_iter()
            .enumerate()
            .map(|(seq, s)| waypoint("big", seq as u64, s))
            .collect();
        for w in &written {
            store.put(w.clone()).await.unwrap();
        }
        let latest = store.latest("big").await.unwrap().unwrap();
        assert_eq!(latest.state, written[2].state);
        let history = store.history("big").await.unwrap();
        assert_eq!(history.len(), 3);
        for (h, w) in history.iter().zip(&written) {
            assert_eq!(h.state, w.state, "waypoint #{}", w.seq);
        }
    }

    pub(super) async fn ten_thousand_threads<S: WaypointStore>(store: Arc<S>) {
        const THREADS: usize = 10_000;
        // As many engines would: many writers at once, which a store may
        // commit together.
        for seq in 0..2u64 {
            let failures = futures::stream::iter(0..THREADS)
                .map(|i| {
                    let store = store.clone();
                    async move {
                        let s = state(json!({"thread": i, "seq": seq}));
                        store.put(waypoint(&format!("many-{i}"), seq, s)).await
                    }
                })
                .buffer_unordered(64)
                .filter(|r| std::future::ready(r.is_err()))
                .count()
                .await;
            assert_eq!(failures, 0);
        }
        let wrong = futures::stream::iter(0..THREADS)
            .map(|i| {
                let store = store.clone();
                async move {
                    let w = store.latest(&format!("many-{i}")).await.unwrap().unwrap();
                    (w.seq, w.state.to_json()) != (1, json!({"thread": i, "seq": 1}))
                }
            })
            .buffer_unordered(64)
            .filter(|wrong| std::future::ready(*wrong))
            .count()
            .await;
        assert_eq!(wrong, 0);
        assert_eq!(store.history("many-9999").await.unwrap().len(), 2);
    }

    pub(super) async fn unicode_and_binary_looking_payloads_round_trip<S: WaypointStore>(
        store: Arc<S>,
    ) {
        let controls: String = (0u8..0x20).map(char::from).collect();
        let bytes: Vec<u8> = (0..=255).collect();
        let payload = json!({
            "controls": controls,
            "nul": "before\u{0000}after",
            "scripts": "日本語 العربية עברית हिन्दी 🦀🧵👩‍👩‍👧 e\u{301} \u{202e}reversed\u{202c}",
            "replacement": "\u{fffd}\u{feff}\u{ffff}",
            "escapes": "\\u0000 \\ud800 \\x00 \" ' \\",
            "bytes": bytes,
            "base64": "AAECAwQFBgcICQoLDA0ODw==",
            "numbers": [u64::MAX, i64::MIN, 1e-300, -0.5, 0],
            "nested": {"clé": {"ключ": ["\u{0001}", null, true]}},
        });
        let threads = [
            "スレッド-🧵",
            "nul-free but \u{202e}rtl",
            "  spaces  ",
            "a'b\"c;--",
        ];
        for thread in threads {
            let s0 = state(json!({"payload": payload}));
            let s1 = state(json!({"payload": payload, "more": "\u{0000}".repeat(3)}));
            store.put(waypoint(thread, 0, s0.clone())).await.unwrap();
            store.put(waypoint(thread, 1, s1.clone())).await.unwrap();
            let history = store.history(thread).await.unwrap();
            assert_eq!(history.len(), 2, "{thread}");
            assert_eq!(history[0].state, s0, "{thread}");
            assert_eq!(history[1].state, s1, "{thread}");
            assert_eq!(history[1].thread_id, thread);
        }
    }

    /// Ids that every store holds, byte for byte, and keeps apart.
    fn storable_ids() -> Vec<String> {
        let mut ids: Vec<String> = [
            "a/b",
            "a/b ",
            "a#1",
            "a>b",
            "case",
            "CASE",
            " lead and trail ",
            "\ttab\nnewline\r",
            "'; DROP TABLE aegis_waypoints; --",
            "Robert'); DELETE FROM aegis_threads; --",
            "%_\\*?[]",
            "\"quoted\" and `ticked`",
            "日本語のスレッド",
            "🧵👩‍👩‍👧",
            "\u{202e}rtl",
            "\u{feff}bom",
            "\u{ffff}\u{10ffff}",
            "\u{1}\u{7f}",
            "é",
            "e\u{301}",
        ]
        .map(String::from)
        .to_vec();
        // The longest ids, in one-, two- and four-byte characters.
        ids.push("x".repeat(MAX_THREAD_ID_BYTES));
        ids.push("é".repeat(MAX_THREAD_ID_BYTES / 2));
        ids.push("🧵".repeat(MAX_THREAD_ID_BYTES / 4));
        ids
    }

    /// Ids no store holds, and the error every store refuses them with.
    fn refused_ids() -> Vec<(String, ThreadIdError)> {
        let too_long = |id: String| {
            let err = aegis::id::validate_thread_id(&id).unwrap_err();
            assert!(matches!(err, ThreadIdError::TooLong { .. }), "{err}");
            (id, err)
        };
        vec![
            (String::new(), ThreadIdError::Empty),
            (
                "a\0b".to_string(),
                ThreadIdError::ContainsNul {
                    preview: "\"a\\0b\"".to_string(),
                    position: 1,
                },
            ),
            (
                "\0".to_string(),
                ThreadIdError::ContainsNul {
                    preview: "\"\\0\"".to_string(),
                    position: 0,
                },
            ),
            too_long("x".repeat(MAX_THREAD_ID_BYTES + 1)),
            too_long("🧵".repeat(MAX_THREAD_ID_BYTES / 4 + 1)),
            too_long("x".repeat(1 << 20)),
        ]
    }

    pub(super) async fn hostile_thread_ids_round_trip_or_are_refused_alike<S: WaypointStore>(
        store: Arc<S>,
    ) {
        let ids = storable_ids();
        for (n, id) in ids.iter().enumerate() {
            let s0 = state(json!({"n": n}));
            let s1 = state(json!({"n": n, "id": id}));
            store.put(waypoint(id, 0, s0.clone())).await.unwrap();
            store.put(waypoint(id, 1, s1.clone())).await.unwrap();
        }
        // Read back after every write, so no two ids shared a thread.
        for (n, id) in ids.iter().enumerate() {
            let history = store.history(id).await.unwrap();
            assert_eq!(history.len(), 2, "{id:?}");
            assert!(history.iter().all(|w| &w.thread_id == id), "{id:?}");
            assert_eq!(history[1].state.to_json(), json!({"n": n, "id": id}));
            let latest = store.latest(id).await.unwrap().unwrap();
            assert_eq!((latest.thread_id.as_str(), latest.seq), (id.as_str(), 1));
        }
        for (id, expected) in refused_ids() {
            let refused = StoreError::InvalidThreadId(expected.clone());
            let put = store.put(waypoint(&id, 0, state(json!({})))).await;
            assert_eq!(put.unwrap_err(), refused, "put {:?}", id.len());
            assert_eq!(store.latest(&id).await.unwrap_err(), refused);
            assert_eq!(store.history(&id).await.unwrap_err(), refused);
            // The engine names the same reason.
            assert_eq!(
                EngineError::from(refused),
                EngineError::InvalidThreadId(expected)
            );
        }
    }

    pub(super) async fn the_engine_refuses_a_bad_id_before_anything_runs<S: WaypointStore>(
        store: Arc<S>,
    ) {
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut graph = WarGraph::new(schema(), EngineLimits::default());
        graph
            .add_node(
                "count",
                NodeSpec::from_fn("count", {
                    let runs = runs.clone();
                    move |_, _| {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Box::pin(async {
                            let mut d = StateDelta::new();
                            d.set("total", 1)?;
                            Ok(d.into())
                        })
                    }
                }),
            )
            .add_edge(START, "count")
            .add_edge("count", END);
        let engine = WarEngine::new(store.clone());
        let mut refused = refused_ids();
        refused.push((
            "orders>checkout".to_string(),
            aegis::id::validate_root_thread_id("orders>checkout").unwrap_err(),
        ));
        for (id, expected) in refused {
            let want = EngineError::InvalidThreadId(expected);
            let start = engine.start(&graph, &id, json!({})).await.unwrap_err();
            assert_eq!(start, want);
            let resume = engine.resume(&graph, &id, None).await.unwrap_err();
            assert_eq!(resume, want);
            let fork = engine
                .chronicle()
                .fork("anything", 0, &id)
                .await
                .unwrap_err();
            assert_eq!(fork, want);
        }
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A hostile id that every store can hold runs like any other.
        for id in storable_ids().into_iter().filter(|id| !id.contains('>')) {
            let state = engine
                .start(&graph, &id, json!({}))
                .await
                .unwrap()
                .into_result()
                .unwrap();
            assert_eq!(state.get("total"), Some(&json!(1)), "{id:?}");
            let history = engine.store().history(&id).await.unwrap();
            assert_eq!(history.len(), 2, "{id:?}");
            assert!(history.iter().all(|w| w.thread_id == id));
        }
    }

    pub(super) async fn long_runs_reconstruct_every_waypoint<S: WaypointStore>(store: Arc<S>) {
        let mut s = initial_state(&schema(), &json!({"title": "x".repeat(2_000)})).unwrap();
        let mut written = Vec::new();
        for seq in 0..300u64 {
            let writes = match seq % 5 {
                0 => json!({"log": {"step": seq}}),
                1 => json!({"log": [seq, seq], "total": 0.5}),
                2 => json!({"meta": {format!("k{}", seq % 7): seq}}),
                3 => json!({"title": format!("title {seq}")}),
                _ => json!({}),
            };
            s = superstep(&s, writes);
            let mut w = waypoint("long", seq, s.clone());
            if seq % 11 == 0 {
                w.status = WaypointStatus::Halted {
                    reason: "shutdown".to_string(),
                };
                w.interrupted = true;
            }
            store.put(w.clone()).await.unwrap();
            written.push(w);
        }
        let history = store.history("long").await.unwrap();
        assert_eq!(history.len(), written.len());
        for (h, w) in history.iter().zip(&written) {
            assert_eq!(view(h), view(w), "waypoint #{}", w.seq);
        }
        let latest = store.latest("long").await.unwrap().unwrap();
        assert_eq!(view(&latest), view(written.last().unwrap()));
    }
}

/// Instantiates every contract test for one store. `$open` is an async
/// block giving `(Arc<store>, guard)`; the guard is dropped (cleaning up)
/// after the test, and `$cleanup` runs with the guard.
macro_rules! contract {
    ($name:ident, |$label:ident| $open:expr, |$guard:ident| $cleanup:block) => {
        mod $name {
            use super::*;

            contract!(@tests $label, $open, $guard, $cleanup;
                an_unknown_thread_is_empty,
                history_is_every_waypoint_in_order,
                a_write_must_follow_the_last_waypoint,
                of_racing_writers_exactly_one_wins,
                threads_are_independent,
                chronicle_forks_a_thread,
                a_10_mb_state_round_trips,
                ten_thousand_threads,
                unicode_and_binary_looking_payloads_round_trip,
                long_runs_reconstruct_every_waypoint,
                hostile_thread_ids_round_trip_or_are_refused_alike,
                the_engine_refuses_a_bad_id_before_anything_runs,
            );
        }
    };
    (@tests $label:ident, $open:expr, $guard:ident, $cleanup:block; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let $label = stringify!($test);
                let (store, $guard) = $open;
                suite::$test(store).await;
                $cleanup
            }
        )*
    };
}

contract!(
    memory,
    |_label| (Arc::new(InMemoryWaypointStore::new()), ()),
    |_guard| {}
);

contract!(
    third_party,
    |_label| (Arc::new(support::third_party::VecStore::default()), ()),
    |_guard| {}
);

#[cfg(feature = "sqlite")]
contract!(
    sqlite,
    |label| {
        let dir = stores::TempDir::new(label);
        let store = aegis::waypoint::SqliteWaypointStore::open(dir.db())
            .await
            .unwrap();
        (Arc::new(store), dir)
    },
    |dir| {
        drop(dir);
    }
);

#[cfg(feature = "postgres")]
contract!(
    postgres,
    |label| {
        let schema = stores::unique_schema(label);
        (Arc::new(stores::pg_store(&schema).await), schema)
    },
    |schema| {
        stores::drop_pg_schema(&schema).await;
    }
);

/// `Waypoint` exposes its persistent collections through std types only.
#[test]
fn a_waypoint_reads_its_visits_and_completed_activations_through_accessors() {
    let w = Waypoint::new("t", 3, WaypointStatus::Running, Battlefield::new())
        .with_visits([(NodeId::new("b"), 1), (NodeId::new("a"), 2)])
        .with_completed([aegis::waypoint::CompletedActivation::new(
            Activation::node("a"),
            StateDelta::new().into(),
            aegis::waypoint::NodeExecutionRecord::new(
                NodeId::new("a"),
                aegis::waypoint::NodeStatus::Succeeded,
                1,
                SystemTime::UNIX_EPOCH,
                0,
            ),
        )]);
    assert_eq!(w.visit_count(&NodeId::new("a")), 2);
    assert_eq!(w.visit_count(&NodeId::new("never")), 0);
    let visits: Vec<(&str, u32)> = w.visits().map(|(n, c)| (n.as_str(), c)).collect();
    assert_eq!(visits, vec![("a", 2), ("b", 1)], "by node id");
    assert_eq!(w.completed().len(), 1);
    let done: Vec<&str> = w
        .completed()
        .map(|c| c.activation.node_id.as_str())
        .collect();
    assert_eq!(done, vec!["a"]);
    let fresh = Waypoint::new("t", 0, WaypointStatus::Running, Battlefield::new());
    assert_eq!((fresh.completed().len(), fresh.visits().len()), (0, 0));
}
