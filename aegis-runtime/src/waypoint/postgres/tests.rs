//! `PostgresWaypointStore` against the PostgreSQL server on 127.0.0.1:5432.

use super::*;

/// The test server; an unreachable one fails the test, naming it.
fn url() -> String {
    std::env::var("AEGIS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_string())
}

fn unique_schema(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("aegis_unit_{name}_{}_{nanos}", std::process::id())
}

async fn admin() -> tokio_postgres::Client {
    let config = tokio_postgres::Config::from_str(&url()).unwrap();
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap_or_else(|e| {
        panic!("the PostgreSQL test server is unreachable ({e}); start it or set AEGIS_TEST_POSTGRES_URL")
    });
    tokio::spawn(connection);
    client
}

async fn drop_schema(schema: &str) {
    admin()
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_version_1_schema_gains_the_effect_ledger() {
    let schema = unique_schema("v1");
    let options = || PostgresOptions::default().with_schema(&schema);
    PostgresWaypointStore::connect_with(&url(), options())
        .await
        .unwrap();
    admin()
        .await
        .batch_execute(&format!(
            "DROP TABLE \"{schema}\".aegis_effects; UPDATE \"{schema}\".aegis_schema_version SET version = 1;"
        ))
        .await
        .unwrap();
    let store = PostgresWaypointStore::connect_with(&url(), options())
        .await
        .unwrap();
    let ledger = store.effect_ledger().unwrap();
    let start = crate::graph::EffectStart::new("k", "t", "n", "charge");
    assert_eq!(ledger.begin(&start).await.unwrap(), None);
    ledger
        .finish("k", &serde_json::json!({"charge": 1}))
        .await
        .unwrap();
    let entries = ledger.entries("t").await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].result, Some(serde_json::json!({"charge": 1})));
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_new_schema_is_created_with_its_version() {
    let schema = unique_schema("fresh");
    let store = PostgresWaypointStore::connect_with(
        &url(),
        PostgresOptions::default().with_schema(&schema),
    )
    .await
    .unwrap();
    assert_eq!(store.schema(), schema);
    let version: i32 = admin()
        .await
        .query_one(
            &format!("SELECT version FROM \"{schema}\".aegis_schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version as u32, POSTGRES_SCHEMA_VERSION);
    // Connecting again finds it current and changes nothing.
    PostgresWaypointStore::connect_with(&url(), PostgresOptions::default().with_schema(&schema))
        .await
        .unwrap();
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_untouched() {
    let schema = unique_schema("newer");
    admin()
        .await
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\";
             CREATE TABLE \"{schema}\".aegis_schema_version (version INTEGER NOT NULL);
             INSERT INTO \"{schema}\".aegis_schema_version VALUES (42);"
        ))
        .await
        .unwrap();
    let err = PostgresWaypointStore::connect_with(
        &url(),
        PostgresOptions::default().with_schema(&schema),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: 42,
            supported: POSTGRES_SCHEMA_VERSION
        }
    );
    let tables: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "only the version table exists");
    drop_schema(&schema).await;
}

#[tokio::test]
async fn schema_names_must_be_plain_identifiers() {
    for bad in ["", "1abc", "a-b", "a\"; DROP TABLE x; --", &"x".repeat(64)] {
        let err = PostgresWaypointStore::connect_with(
            &url(),
            PostgresOptions::default().with_schema(bad),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, StoreError::Backend(m) if m.contains("schema name")),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error_without_the_password() {
    let err = PostgresWaypointStore::connect(
        "host=127.0.0.1 port=1 user=alice password=hunter2 dbname=app connect_timeout=2",
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("cannot connect")
            && message.contains("host=127.0.0.1 port=1 dbname=app user=alice"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}

#[tokio::test]
async fn debug_output_never_shows_the_connection_string() {
    let schema = unique_schema("debug");
    let store = PostgresWaypointStore::connect_with(
        &url(),
        PostgresOptions::default().with_schema(&schema),
    )
    .await
    .unwrap();
    let shown = format!("{store:?}");
    assert!(shown.contains(&schema), "{shown}");
    assert!(!shown.contains("host="), "{shown}");
    drop_schema(&schema).await;
}

fn waypoint(thread: &str, seq: u64) -> Waypoint {
    Waypoint {
        thread_id: thread.into(),
        seq,
        superstep: seq as u32,
        status: crate::waypoint::WaypointStatus::Running,
        state: crate::state::Battlefield::new(),
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
        created_at: std::time::SystemTime::now(),
    }
}

async fn store_in(schema: &str, connection: &str) -> PostgresWaypointStore {
    PostgresWaypointStore::connect_with(connection, PostgresOptions::default().with_schema(schema))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_server_error_keeps_its_sqlstate_message_and_detail() {
    let schema = unique_schema("sqlstate");
    let store = store_in(&schema, &url()).await;
    // A constraint the store's rows cannot meet: every put violates it.
    admin()
        .await
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".aegis_waypoints \
             ADD CONSTRAINT tiny_payload CHECK (octet_length(payload) < 1)"
        ))
        .await
        .unwrap();
    let err = store.put(waypoint("t", 0)).await.unwrap_err();
    let StoreError::Backend(message) = &err else {
        panic!("{err:?}");
    };
    assert!(
        message.starts_with("postgres: ERROR 23514: new row for relation \"aegis_waypoints\" violates check constraint \"tiny_payload\"; detail: Failing row contains (t, 0,"),
        "{message}"
    );
    // The failing row may be large; each part is bounded.
    assert!(message.chars().count() < 1_200, "{message}");
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_server_error_loses_its_secrets() {
    let schema = unique_schema("redacted");
    let password = "conn-pw-7f3a9c";
    // Trust authentication ignores the password, but the store knows it.
    let store = store_in(&schema, &format!("{} password={password}", url())).await;
    admin()
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION \"{schema}\".leak() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               RAISE EXCEPTION 'refused: password=hunter2-secret'
                 USING DETAIL = 'api_key=sk-abcdefghijklmnop1234',
                       HINT = 'Authorization: Bearer tok-0123456789abcdef',
                       ERRCODE = 'P0001';
             END $$;
             CREATE TRIGGER leak BEFORE INSERT ON \"{schema}\".aegis_waypoints
               FOR EACH ROW EXECUTE FUNCTION \"{schema}\".leak();"
        ))
        .await
        .unwrap();
    let err = store.put(waypoint("t", 0)).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("postgres: ERROR P0001: refused: password=[REDACTED]; detail: "),
        "{message}"
    );
    assert!(message.contains("; hint: "), "{message}");
    for secret in [
        "hunter2-secret",
        "sk-abcdefghijklmnop1234",
        "tok-0123456789abcdef",
        password,
    ] {
        assert!(!message.contains(secret), "{secret}: {message}");
    }
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_schema_the_user_cannot_create_is_a_permission_error_that_says_so() {
    let role = format!("aegis_unit_ro_{}", std::process::id());
    let admin = admin().await;
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'ro-pw-5d1e';"
        ))
        .await
        .unwrap();
    let config = tokio_postgres::Config::from_str(&url()).unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let dbname = config.get_dbname().unwrap_or("test").to_string();
    let connection =
        format!("host={host} port={port} dbname={dbname} user={role} password=ro-pw-5d1e");
    let err = PostgresWaypointStore::connect_with(
        &connection,
        PostgresOptions::default().with_schema(unique_schema("denied")),
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    admin
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
        .await
        .unwrap();
    assert!(
        message.starts_with("postgres: ERROR 42501: permission denied for database"),
        "{message}"
    );
    assert!(!message.contains("ro-pw-5d1e"), "{message}");
}

#[tokio::test]
async fn ids_no_store_holds_are_refused_before_any_query() {
    let schema = unique_schema("ids");
    let store = store_in(&schema, &url()).await;
    for id in ["", "a\0b"] {
        assert!(matches!(
            store.row_stats(id).await,
            Err(StoreError::InvalidThreadId(_))
        ));
    }
    drop_schema(&schema).await;
}

#[tokio::test]
async fn malformed_connection_strings_never_show_their_password() {
    for connection in [
        "postgresql:/alice:hunter2@127.0.0.1/test",
        "postgres//:hunter2@127.0.0.1",
        "host=127.0.0.1 password='hunter2",
        "postgresql://alice:hunter2@127.0.0.1:notaport/test",
        "host=127.0.0.1 port=1 user=alice password='hunter 2' connect_timeout=2",
        "postgresql://alice:hunt@er2@127.0.0.1:1/test?connect_timeout=2",
        "postgresql://alice@127.0.0.1:1/test?password=hunter2&connect_timeout=2",
    ] {
        let err = PostgresWaypointStore::connect(connection)
            .await
            .unwrap_err();
        let shown = format!("{err} {err:?}");
        for secret in ["hunter2", "hunter 2", "er2@"] {
            assert!(!shown.contains(secret), "{connection}: {shown}");
        }
    }
}

#[tokio::test]
async fn pool_size_caps_the_connections_under_concurrent_writes() {
    let schema = unique_schema("poolcap");
    // The application name tells this store's connections apart.
    let app = format!("aegis_pool_{}", std::process::id());
    let connection = format!("{} application_name={app}", url());
    let store = Arc::new(
        PostgresWaypointStore::connect_with(
            &connection,
            PostgresOptions::default()
                .with_schema(&schema)
                .with_pool_size(2),
        )
        .await
        .unwrap(),
    );
    let writes: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let thread = format!("t{i}");
                for seq in 0..3 {
                    store.put(waypoint(&thread, seq)).await.unwrap();
                }
            })
        })
        .collect();
    for w in writes {
        w.await.unwrap();
    }
    for i in 0..16 {
        let latest = store.latest(&format!("t{i}")).await.unwrap().unwrap();
        assert_eq!(latest.seq, 2);
    }
    let open: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert!((1..=2).contains(&open), "{open} connections open");
    drop(store);
    drop_schema(&schema).await;
}
