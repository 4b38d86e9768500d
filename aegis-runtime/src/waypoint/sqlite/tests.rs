//! `SqliteWaypointStore` on temporary database files.

use super::*;
use crate::state::Battlefield;
use crate::waypoint::WaypointStatus;
use serde_json::json;
use std::time::SystemTime;

/// A fresh database path in its own directory, removed when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "aegis-sqlite-unit-{}-{name}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDb(dir)
    }

    fn path(&self) -> PathBuf {
        self.0.join("waypoints.sqlite")
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn waypoint(thread: &str, seq: u64, state: serde_json::Value) -> Waypoint {
    Waypoint {
        thread_id: thread.into(),
        seq,
        superstep: seq as u32,
        status: WaypointStatus::Running,
        state: serde_json::from_value::<Battlefield>(state).unwrap(),
        vanguard: Vec::new().into(),
        interrupted: false,
        completed: Default::default(),
        records: Vec::new(),
        parley: None,
        visits: Default::default(),
        fingerprint: "fp".into(),
        manifest: None,
        previous_graph: None,
        handled: Vec::new(),
        created_at: SystemTime::now(),
    }
}

fn tables(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_new_file_gets_the_schema_in_wal_mode_and_keeps_its_waypoints() {
    let dir = TempDb::new("fresh");
    let path = dir.path();
    {
        let store = SqliteWaypointStore::open(&path).await.unwrap();
        store.put(waypoint("t", 0, json!({"a": 1}))).await.unwrap();
        store.put(waypoint("t", 1, json!({"a": 2}))).await.unwrap();
    }
    assert_eq!(
        tables(&path),
        [
            "aegis_effects",
            "aegis_schema_version",
            "aegis_threads",
            "aegis_waypoints"
        ]
    );
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: u32 = conn
        .query_row("SELECT version FROM aegis_schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SQLITE_SCHEMA_VERSION);

    let reopened = SqliteWaypointStore::open(&path).await.unwrap();
    let latest = reopened.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.seq, 1);
    assert_eq!(latest.state.get("a"), Some(&json!(2)));
}

#[tokio::test]
async fn a_version_1_file_gains_the_effect_ledger_and_keeps_its_waypoints() {
    let dir = TempDb::new("v1");
    let path = dir.path();
    {
        let store = SqliteWaypointStore::open(&path).await.unwrap();
        store.put(waypoint("t", 0, json!({"a": 1}))).await.unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE aegis_effects; UPDATE aegis_schema_version SET version = 1;")
        .unwrap();
    let store = SqliteWaypointStore::open(&path).await.unwrap();
    assert!(tables(&path).contains(&"aegis_effects".to_string()));
    assert_eq!(store.latest("t").await.unwrap().unwrap().seq, 0);
    let ledger = store.effect_ledger().unwrap();
    let start = crate::graph::EffectStart::new("k", "t", "n", "charge");
    assert_eq!(ledger.begin(&start).await.unwrap(), None);
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_the_file_left_untouched() {
    let dir = TempDb::new("newer");
    let path = dir.path();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE aegis_schema_version (version INTEGER NOT NULL);
             INSERT INTO aegis_schema_version VALUES (99);",
        )
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteWaypointStore::open(&path).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: 99,
            supported: SQLITE_SCHEMA_VERSION
        }
    );
    assert!(err.to_string().contains("upgrade aegis"), "{err}");
    // Not even the journal mode changed.
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(tables(&path), ["aegis_schema_version"]);
}

#[tokio::test]
async fn a_row_in_a_newer_format_is_refused_by_name() {
    let dir = TempDb::new("format");
    let path = dir.path();
    let store = SqliteWaypointStore::open(&path).await.unwrap();
    store.put(waypoint("t", 0, json!({}))).await.unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE aegis_waypoints SET payload = CAST(?1 AS BLOB)",
            [r#"{"format":7,"whatever":"a future layout"}"#],
        )
        .unwrap();
    }
    let err = store.latest("t").await.unwrap_err();
    assert_eq!(
        err,
        StoreError::UnsupportedFormat {
            thread_id: "t".into(),
            seq: 0,
            found: 7,
            supported: crate::waypoint::WAYPOINT_FORMAT_VERSION
        }
    );
}

#[tokio::test]
async fn two_stores_on_one_file_see_each_others_writes_and_conflicts() {
    let dir = TempDb::new("shared");
    let path = dir.path();
    let a = SqliteWaypointStore::open(&path).await.unwrap();
    let b = SqliteWaypointStore::open(&path).await.unwrap();
    a.put(waypoint("t", 0, json!({"n": 0}))).await.unwrap();
    assert_eq!(b.latest("t").await.unwrap().unwrap().seq, 0);
    b.put(waypoint("t", 1, json!({"n": 1}))).await.unwrap();
    // `a` still thinks the thread is at #0; its write of #1 loses.
    let err = a
        .put(waypoint("t", 1, json!({"n": "a's"})))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict {
            thread_id: "t".into(),
            expected_seq: 1,
            actual_next: 2
        }
    );
    // ... and `a` writing #2 after #1 came from elsewhere encodes it right.
    a.put(waypoint("t", 2, json!({"n": 2, "m": "x"})))
        .await
        .unwrap();
    let history = b.history("t").await.unwrap();
    let states: Vec<_> = history.iter().map(|w| w.state.to_json()).collect();
    assert_eq!(
        states,
        [json!({"n": 0}), json!({"n": 1}), json!({"n": 2, "m": "x"})]
    );
}

#[tokio::test]
async fn rows_are_deltas_after_a_snapshot() {
    let dir = TempDb::new("deltas");
    let path = dir.path();
    let store = SqliteWaypointStore::open(&path).await.unwrap();
    let big = "b".repeat(50_000);
    for seq in 0..10u64 {
        let items: Vec<u64> = (0..seq).collect();
        store
            .put(waypoint("t", seq, json!({"big": big, "items": items})))
            .await
            .unwrap();
    }
    let stats = store.row_stats("t").await.unwrap();
    assert_eq!(stats.len(), 10);
    assert!(stats[0].snapshot && stats[0].payload_bytes > 50_000);
    for row in &stats[1..] {
        assert!(!row.snapshot, "{stats:?}");
        assert!(row.payload_bytes < 500, "{stats:?}");
    }
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(
        latest.state.get("items"),
        Some(&json!((0..9).collect::<Vec<u64>>()))
    );
}

#[tokio::test]
async fn ids_no_store_holds_are_refused_before_any_query() {
    let dir = TempDb::new("ids");
    let store = SqliteWaypointStore::open(dir.path()).await.unwrap();
    for id in ["", "a\0b"] {
        assert!(matches!(
            store.row_stats(id).await,
            Err(StoreError::InvalidThreadId(_))
        ));
        assert!(matches!(
            store.put(waypoint(id, 0, json!({}))).await,
            Err(StoreError::InvalidThreadId(_))
        ));
    }
    // SQLite itself would have stored the NUL id: nothing was written.
    let rows: i64 = Connection::open(dir.path())
        .unwrap()
        .query_row("SELECT count(*) FROM aegis_waypoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}
