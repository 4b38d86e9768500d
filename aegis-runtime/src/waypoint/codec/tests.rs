//! Round trips of the waypoint row codec, and a fixture of the current format
//! that must keep decoding.

use super::*;
use crate::error::{NodeError, NodeErrorSource, Transience};
use crate::graph::{Directive, NextStep};
use crate::id::NodeId;
use crate::state::initial_state;
use crate::waypoint::{AttemptRecord, NodeStatus};
use serde_json::json;
use std::time::Duration;

const RULE: SnapshotRule = SnapshotRule { max_chain: 1_000 };

fn schema() -> BattlefieldSchema {
    let f = |n: &str, d| FieldSpec::new(FieldName::new(n).unwrap(), d, None, false);
    BattlefieldSchema::new(vec![
        f("question", DispatchRule::LastWrite),
        f("answer", DispatchRule::LastWrite),
        f("log", DispatchRule::Append),
        f("total", DispatchRule::Sum),
        f("tags", DispatchRule::LastWrite),
    ])
}

fn step(base: &Battlefield, writes: Value) -> Battlefield {
    let delta: StateDelta = {
        let mut d = StateDelta::new();
        for (k, v) in writes.as_object().unwrap() {
            d.set(k.as_str(), v).unwrap();
        }
        d
    };
    merge(&schema(), base, [(Writer::node("n"), &delta)]).unwrap()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn waypoint(seq: u64, state: Battlefield) -> Waypoint {
    Waypoint {
        thread_id: "t".into(),
        seq,
        superstep: seq as u32,
        status: WaypointStatus::Running,
        state,
        vanguard: vec![Activation::node("n")].into(),
        interrupted: false,
        completed: Default::default(),
        records: Vec::new(),
        parley: None,
        visits: [(NodeId::new("n"), seq as u32)].into_iter().collect(),
        fingerprint: "fp".into(),
        manifest: None,
        previous_graph: None,
        handled: Vec::new(),
        created_at: at(1_700_000_000 + seq),
    }
}

fn json_of(w: &Waypoint) -> Value {
    serde_json::to_value(w).unwrap()
}

/// Encodes the waypoints as one thread's rows, then decodes them back.
fn round_trip(waypoints: &[Waypoint], rule: SnapshotRule) -> (Vec<EncodedRow>, Vec<Waypoint>) {
    let mut tip: Option<Tip> = None;
    let mut rows = Vec::new();
    for w in waypoints {
        let row = encode(w.clone(), tip.as_ref(), rule).unwrap();
        tip = Some(row.tip.clone());
        rows.push(row);
    }
    let mut decoder = ChainDecoder::new("t");
    let decoded = rows
        .iter()
        .enumerate()
        .map(|(i, r)| decoder.push(i as u64, &r.payload).unwrap())
        .collect();
    (rows, decoded)
}

#[test]
fn a_thread_round_trips_through_snapshots_and_deltas() {
    // A large field keeps the snapshot heavier than the deltas after it.
    let question = "q".repeat(5_000);
    let s0 = initial_state(&schema(), &json!({"question": question, "log": ["a"]})).unwrap();
    let s1 = step(&s0, json!({"log": "b", "total": 2}));
    let s2 = step(&s1, json!({"log": ["c", "d"], "answer": {"x": [1, 2]}}));
    let s3 = step(&s2, json!({"answer": "replaced", "tags": [1, 2, 3]}));
    // A LastWrite list replaced by a shorter one is a set, not an append.
    let s4 = step(&s3, json!({"tags": [9]}));
    // A LastWrite list replaced by a longer one with another prefix too.
    let s5 = step(&s4, json!({"tags": [8, 7]}));
    let s6 = step(&s5, json!({}));
    let waypoints: Vec<Waypoint> = [s0, s1, s2, s3, s4, s5, s6]
        .into_iter()
        .enumerate()
        .map(|(i, s)| waypoint(i as u64, s))
        .collect();
    let (rows, decoded) = round_trip(&waypoints, RULE);
    assert!(rows[0].snapshot);
    assert!(rows[1..].iter().all(|r| !r.snapshot), "{rows:?}");
    for (w, d) in waypoints.iter().zip(&decoded) {
        assert_eq!(json_of(w), json_of(d));
    }
}

#[test]
fn a_delta_stores_only_the_appended_items_and_changed_fields() {
    let big = "x".repeat(10_000);
    let s0 = initial_state(&schema(), &json!({"question": big, "log": ["a"]})).unwrap();
    let s1 = step(&s0, json!({"log": "b", "total": 1}));
    let row = encode(
        waypoint(1, s1),
        Some(&encode(waypoint(0, s0), None, RULE).unwrap().tip),
        RULE,
    )
    .unwrap();
    let stored: Value = serde_json::from_slice(&row.payload).unwrap();
    assert_eq!(
        stored["state"],
        json!({"delta": {"set": {"total": 1}, "append": {"log": ["b"]}}})
    );
    // The fingerprint is the previous row's, so it is not repeated.
    assert!(stored.get("fingerprint").is_none());
}

#[test]
fn unchanged_fields_that_are_not_shared_are_still_not_stored() {
    // A state read back from a store shares nothing with the engine's.
    let s0 = initial_state(&schema(), &json!({"question": "q", "log": [1, 2]})).unwrap();
    let copy: Battlefield = serde_json::from_value(s0.to_json()).unwrap();
    assert!(!copy.shares_field_with(&s0, "question"));
    let changes = diff(&s0, &copy);
    assert_eq!(changes, StateChanges::default());
}

#[test]
fn removed_fields_are_recorded_and_reapplied() {
    let old: Battlefield = serde_json::from_value(json!({"a": 1, "b": [1]})).unwrap();
    let new: Battlefield = serde_json::from_value(json!({"b": [1, 2]})).unwrap();
    let changes = diff(&old, &new);
    assert_eq!(changes.remove, vec![FieldName::new("a").unwrap()]);
    assert_eq!(apply(&old, changes).unwrap(), new);
}

#[test]
fn row_size_follows_the_delta_not_the_state() {
    let mut state = initial_state(&schema(), &json!({})).unwrap();
    let mut waypoints = Vec::new();
    for i in 0..300u64 {
        state = step(&state, json!({"log": {"item": i}}));
        waypoints.push(waypoint(i, state.clone()));
    }
    let (rows, decoded) = round_trip(&waypoints, SnapshotRule { max_chain: 64 });
    assert_eq!(json_of(&waypoints[299]), json_of(&decoded[299]));
    let deltas: Vec<usize> = rows
        .iter()
        .filter(|r| !r.snapshot)
        .map(|r| r.payload.len())
        .collect();
    // Every delta row is about the same size, however long the list is.
    let (min, max) = (deltas.iter().min().unwrap(), deltas.iter().max().unwrap());
    assert!(max - min <= 8, "delta rows vary from {min} to {max} bytes");
    // Snapshots come now and then, not on every row, and cost no more than
    // about the deltas themselves.
    let snapshots = rows.iter().filter(|r| r.snapshot).count();
    assert!((2..=100).contains(&snapshots), "{snapshots} snapshots");
    let delta_bytes: usize = deltas.iter().sum();
    let total: usize = rows.iter().map(|r| r.payload.len()).sum();
    assert!(total <= 2 * delta_bytes + 5_000, "{total} vs {delta_bytes}");
    // Storing every state whole would take several times as much.
    let whole: usize = waypoints
        .iter()
        .map(|w| encode(w.clone(), None, RULE).unwrap().payload.len())
        .sum();
    assert!(total * 3 < whole, "{total} bytes stored, {whole} if whole");
}

#[test]
fn a_snapshot_comes_when_the_chain_is_long_or_outweighs_the_last_snapshot() {
    let rule = SnapshotRule { max_chain: 3 };
    let tip = |chain_len, chain_bytes| Tip {
        seq: 0,
        state: Battlefield::new(),
        fingerprint: Default::default(),
        manifest: None,
        chain_len,
        chain_bytes,
        snapshot_bytes: 100,
    };
    assert!(rule.wants_snapshot(None));
    assert!(!rule.wants_snapshot(Some(&tip(2, 99))));
    assert!(rule.wants_snapshot(Some(&tip(3, 10))));
    assert!(rule.wants_snapshot(Some(&tip(1, 100))));
}

#[test]
fn a_base_that_is_not_the_previous_row_gives_a_snapshot() {
    let s = initial_state(&schema(), &json!({})).unwrap();
    let tip = encode(waypoint(0, s.clone()), None, RULE).unwrap().tip;
    assert!(
        !encode(waypoint(1, s.clone()), Some(&tip), RULE)
            .unwrap()
            .snapshot
    );
    assert!(encode(waypoint(2, s), Some(&tip), RULE).unwrap().snapshot);
}

#[test]
fn a_newer_format_is_refused_by_name() {
    let s = initial_state(&schema(), &json!({})).unwrap();
    let row = encode(waypoint(0, s), None, RULE).unwrap();
    let mut value: Value = serde_json::from_slice(&row.payload).unwrap();
    value["format"] = json!(WAYPOINT_FORMAT_VERSION + 1);
    let err = ChainDecoder::new("t")
        .push(0, &serde_json::to_vec(&value).unwrap())
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::UnsupportedFormat {
            thread_id: "t".into(),
            seq: 0,
            found: WAYPOINT_FORMAT_VERSION + 1,
            supported: WAYPOINT_FORMAT_VERSION,
        }
    );
    assert!(err.to_string().contains("upgrade aegis"));
}

#[test]
fn a_delta_without_its_base_or_garbage_is_corrupt() {
    let s0 = initial_state(&schema(), &json!({})).unwrap();
    let s1 = step(&s0, json!({"total": 1}));
    let (rows, _) = round_trip(&[waypoint(0, s0), waypoint(1, s1)], RULE);
    let err = ChainDecoder::new("t")
        .push(1, &rows[1].payload)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { seq: 1, message, .. } if message.contains("without the row before")),
        "{err:?}"
    );
    let err = ChainDecoder::new("t").push(0, b"\x00\xff").unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { seq: 0, .. }), "{err:?}");
}

// The fixtures: the rows of one thread as the current format writes them,
// one row per line. Decoding it must give the waypoints built below, and
// encoding those must give the very same bytes, so a format change shows up
// here as a deliberate diff. Set AEGIS_WRITE_FIXTURES=1 to rewrite it after
// bumping WAYPOINT_FORMAT_VERSION (and keep the old fixture for the old
// format's decoder).
const FIXTURE_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/waypoint_format_v2.jsonl"
);

/// The same thread as format 1 wrote it (before manifests).
const V1_FIXTURE_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/waypoint_format_v1.jsonl"
);

fn manifest(kind_of_b: &str) -> Arc<GraphManifest> {
    use crate::graph::{FieldShape, NodeShape};
    let node = |id: &str, kind: &str| {
        (
            NodeId::new(id),
            NodeShape {
                kind: kind.into(),
                worker: false,
            },
        )
    };
    Arc::new(GraphManifest {
        nodes: [
            node("a", "function:a"),
            node("b", kind_of_b),
            node("c", "gate"),
        ]
        .into(),
        fields: schema()
            .fields()
            .iter()
            .map(|f| {
                let shape = FieldShape {
                    dispatch: f.dispatch,
                    has_default: f.default.is_some(),
                    required: f.required,
                };
                (f.name.clone(), shape)
            })
            .collect(),
    })
}

/// The fixture thread as format 2 writes it: with manifests, and moved onto
/// another graph (by a migration) before its last waypoint.
fn fixture_thread() -> Vec<Waypoint> {
    let mut thread = fixture_thread_v1();
    for w in &mut thread {
        w.manifest = Some(manifest("paladin:answer"));
    }
    for w in &mut thread[4..] {
        w.fingerprint = "v7:fedcba9876543210".into();
        w.manifest = Some(manifest("function:b"));
        // As rows written before migrations had names and node maps.
        w.previous_graph = Some(std::sync::Arc::new(PreviousGraph {
            fingerprint: "v1:0123456789abcdef".into(),
            migrated: true,
            migration: None,
            mapped_nodes: Vec::new(),
        }));
    }
    thread
}

fn fixture_thread_v1() -> Vec<Waypoint> {
    let s0 = initial_state(
        &schema(),
        &json!({"question": "¿Qué hora es? 🕰 \u{0000}\u{fffd}", "log": []}),
    )
    .unwrap();
    let s1 = step(
        &s0,
        json!({"log": {"by": "a"}, "total": 1.5, "answer": {"bytes": [0, 255, 127]}}),
    );
    let node_error = NodeError {
        node_id: NodeId::new("b"),
        attempt: 2,
        transience: Transience::Transient,
        source: NodeErrorSource::Llm {
            status: Some(503),
            provider: Some("openai".into()),
            kind: "ProviderError".into(),
            message: "upstream overloaded".into(),
        },
        retry_after: None,
    };
    let record =
        |node: &str, status: NodeStatus, attempts: Vec<AttemptRecord>| NodeExecutionRecord {
            node_id: NodeId::new(node),
            task_key: None,
            status,
            attempt: attempts.len() as u32 + 1,
            attempts,
            cache_hit: false,
            started_at: at(1_700_000_100),
            duration_ms: 12,
            retry_skipped: None,
            extras: None,
            cache_origin: None,
        };
    let mut delta = StateDelta::new();
    delta.set("log", json!({"by": "c"})).unwrap();
    let w0 = Waypoint {
        thread_id: "fixture".into(),
        seq: 0,
        superstep: 0,
        status: WaypointStatus::Running,
        state: s0,
        vanguard: vec![Activation::node("a")].into(),
        interrupted: false,
        completed: Default::default(),
        records: Vec::new(),
        parley: None,
        visits: Default::default(),
        fingerprint: "v1:0123456789abcdef".into(),
        manifest: None,
        previous_graph: None,
        handled: Vec::new(),
        created_at: at(1_700_000_000),
    };
    let w1 = Waypoint {
        seq: 1,
        superstep: 1,
        state: s1.clone(),
        vanguard: vec![Activation::node("b"), Activation::node("c")].into(),
        records: vec![record("a", NodeStatus::Succeeded, Vec::new())],
        parley: None,
        visits: Visits::from_iter([(NodeId::new("a"), 1u32)]),
        created_at: at(1_700_000_001),
        ..w0.clone()
    };
    let w2 = Waypoint {
        seq: 2,
        superstep: 2,
        status: WaypointStatus::Failed {
            // The text as the version that wrote the fixtures displayed the
            // error: stored data, not this version's `Display`.
            error: "node `b` failed on attempt 2 (transient): llm openai (HTTP 503): upstream overloaded"
                .to_string(),
            node_error: Some(Box::new(node_error.clone())),
        },
        state: s1.clone(),
        interrupted: true,
        completed: imbl::Vector::from(vec![std::sync::Arc::new(CompletedActivation {
            activation: Activation::node("c"),
            directive: Directive {
                delta,
                next: NextStep::Goto(NodeId::new("a")),
            },
            record: record("c", NodeStatus::Succeeded, Vec::new()),
            handled: None,
        })])
        .into(),
        records: vec![record(
            "b",
            NodeStatus::Failed,
            vec![AttemptRecord {
                attempt: 1,
                started_at: at(1_700_000_100),
                duration_ms: 5,
                error: node_error,
                spend: None,
            }],
        )],
        parley: None,
        visits: Visits::from_iter([
            (NodeId::new("a"), 1u32),
            (NodeId::new("b"), 1),
            (NodeId::new("c"), 1),
        ]),
        created_at: at(1_700_000_002),
        ..w1.clone()
    };
    let w3 = Waypoint {
        seq: 3,
        status: WaypointStatus::Halted {
            reason: "shutdown".into(),
        },
        completed: Default::default(),
        records: vec![record(
            "b",
            NodeStatus::Skipped {
                reason: "shutdown".into(),
            },
            Vec::new(),
        )],
        created_at: at(1_700_000_003),
        ..w2.clone()
    };
    let s4 = step(
        &s1,
        json!({"log": [{"by": "b"}, {"by": "c"}], "tags": ["🦀"]}),
    );
    let w4 = Waypoint {
        seq: 4,
        superstep: 3,
        status: WaypointStatus::Completed,
        state: s4,
        vanguard: Vec::new().into(),
        interrupted: false,
        records: Vec::new(),
        created_at: at(1_700_000_004),
        ..w3.clone()
    };
    vec![w0, w1, w2, w3, w4]
}

fn encode_thread(waypoints: &[Waypoint]) -> String {
    let mut tip: Option<Tip> = None;
    let mut out = String::new();
    for w in waypoints {
        let row = encode(w.clone(), tip.as_ref(), RULE).unwrap();
        tip = Some(row.tip);
        out.push_str(std::str::from_utf8(&row.payload).unwrap());
        out.push('\n');
    }
    out
}

#[test]
fn the_checked_in_fixture_decodes_and_is_what_this_version_writes() {
    let expected = fixture_thread();
    let encoded = encode_thread(&expected);
    if std::env::var_os("AEGIS_WRITE_FIXTURES").is_some() {
        std::fs::write(FIXTURE_PATH, &encoded).unwrap();
    }
    let fixture = std::fs::read_to_string(FIXTURE_PATH).unwrap();
    let mut decoder = ChainDecoder::new("fixture");
    let decoded: Vec<Waypoint> = fixture
        .lines()
        .enumerate()
        .map(|(seq, line)| decoder.push(seq as u64, line.as_bytes()).unwrap())
        .collect();
    assert_eq!(decoded.len(), expected.len());
    for (d, e) in decoded.iter().zip(&expected) {
        assert_eq!(json_of(d), json_of(e), "waypoint #{}", e.seq);
    }
    // Deltas, and a snapshot once they outweigh the one before.
    let kinds: Vec<bool> = fixture
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["state"]
                .get("snapshot")
                .is_some()
        })
        .collect();
    assert_eq!(kinds, [true, false, false, true, false]);
    // The manifest travels with the fingerprint: in snapshots, and in the
    // delta row where the graph changed, nowhere else.
    let manifests: Vec<bool> = fixture
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap()
                .get("manifest")
                .is_some()
        })
        .collect();
    assert_eq!(manifests, [true, false, false, true, true]);
    assert_eq!(
        fixture, encoded,
        "the waypoint format changed: bump WAYPOINT_FORMAT_VERSION and add a fixture for it"
    );
}

#[test]
fn the_format_1_fixture_still_decodes_without_manifests() {
    let expected = fixture_thread_v1();
    let fixture = std::fs::read_to_string(V1_FIXTURE_PATH).unwrap();
    assert!(fixture.lines().all(|l| l.starts_with(r#"{"format":1,"#)));
    let mut decoder = ChainDecoder::new("fixture");
    let decoded: Vec<Waypoint> = fixture
        .lines()
        .enumerate()
        .map(|(seq, line)| decoder.push(seq as u64, line.as_bytes()).unwrap())
        .collect();
    assert_eq!(decoded.len(), expected.len());
    for (d, e) in decoded.iter().zip(&expected) {
        assert!(d.manifest.is_none() && d.previous_graph.is_none());
        assert_eq!(json_of(d), json_of(e), "waypoint #{}", e.seq);
    }
}

#[test]
fn handled_failures_round_trip_and_a_row_without_them_reads_none() {
    use crate::waypoint::{HandledFailure, HandlerKind};
    let s0 = initial_state(&schema(), &json!({"log": ["a"]})).unwrap();
    let s1 = step(&s0, json!({"log": "b"}));
    let mut w1 = waypoint(1, s1);
    w1.handled = vec![HandledFailure {
        node_id: NodeId::new("book"),
        task_key: Some("q-3".into()),
        superstep: 1,
        error: NodeError::new(
            NodeId::new("book"),
            2,
            Transience::Transient,
            NodeErrorSource::Function {
                message: "down".into(),
            },
        ),
        handler: HandlerKind::Route {
            to: NodeId::new("cancel"),
        },
    }];
    let waypoints = [waypoint(0, s0), w1];
    let (rows, decoded) = round_trip(&waypoints, RULE);
    assert!(!rows[1].snapshot, "carried by a delta row too");
    assert_eq!(decoded[1].handled, waypoints[1].handled);
    assert!(decoded[0].handled.is_empty());
    let first: Value = serde_json::from_slice(&rows[0].payload).unwrap();
    assert!(first.get("handled").is_none(), "absent when none: {first}");
}

#[test]
fn a_named_migration_and_its_node_map_round_trip_and_old_rows_read_without_them() {
    let s0 = initial_state(&schema(), &json!({"log": ["a"]})).unwrap();
    let s1 = step(&s0, json!({"log": "b"}));
    let mut w1 = waypoint(1, s1);
    let moved = PreviousGraph::new("v7:0123").with_migration(
        "review-becomes-approve",
        [(NodeId::new("review"), NodeId::new("approve"))],
    );
    w1.previous_graph = Some(Arc::new(moved.clone()));
    let waypoints = [waypoint(0, s0), w1];
    let (_, decoded) = round_trip(&waypoints, RULE);
    assert_eq!(decoded[1].previous_graph.as_deref(), Some(&moved));
    assert_eq!(decoded[0].previous_graph, None);

    // A row written before migrations had names reads with none.
    let old: PreviousGraph =
        serde_json::from_value(json!({"fingerprint": "v7:0123", "migrated": true})).unwrap();
    assert_eq!(old.migration, None);
    assert!(old.mapped_nodes.is_empty() && old.migrated);
}

#[test]
fn a_hit_records_its_cache_scope_and_a_row_without_one_reads_graph() {
    use crate::policy::CacheScope;
    use crate::trace::CacheOrigin;
    let s0 = initial_state(&schema(), &json!({"log": ["a"]})).unwrap();
    let s1 = step(&s0, json!({"answer": "cached"}));
    let hit = |scope| NodeExecutionRecord {
        node_id: NodeId::new("answer"),
        task_key: None,
        status: NodeStatus::Succeeded,
        attempt: 1,
        attempts: Vec::new(),
        cache_hit: true,
        started_at: at(1_700_000_100),
        duration_ms: 0,
        retry_skipped: None,
        extras: None,
        cache_origin: Some(Arc::new(CacheOrigin {
            node_id: NodeId::new("answer"),
            task_key: None,
            thread_id: Some("earlier".into()),
            attempt: 1,
            served_by: None,
            model: None,
            chain_position: None,
            fallback: false,
            scope,
        })),
    };
    let mut w0 = waypoint(0, s0);
    w0.records = vec![hit(CacheScope::Node)];
    let mut w1 = waypoint(1, s1);
    w1.records = vec![hit(CacheScope::Graph)];
    let waypoints = [w0, w1];
    let (rows, decoded) = round_trip(&waypoints, RULE);
    assert!(rows[0].snapshot && !rows[1].snapshot, "both row kinds");
    assert_eq!(decoded[0].records, waypoints[0].records);
    assert_eq!(decoded[1].records, waypoints[1].records);
    let scope_of = |row: &EncodedRow| {
        let row: Value = serde_json::from_slice(&row.payload).unwrap();
        row["records"][0]["cache_origin"].get("scope").cloned()
    };
    assert_eq!(scope_of(&rows[0]), Some(json!("node")));
    // The default is not written, so a graph-scoped hit's row is the row
    // an older build wrote, and such a row reads as graph-scoped.
    assert_eq!(scope_of(&rows[1]), None);
    let origin = decoded[1].records[0].cache_origin.as_deref().unwrap();
    assert_eq!(origin.scope, CacheScope::Graph);
}
