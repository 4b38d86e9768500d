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
    pool::connect(&config).await.unwrap_or_else(|e| {
        panic!("the PostgreSQL test server is unreachable ({e}); start it or set AEGIS_TEST_POSTGRES_URL")
    })
}

async fn drop_schema(schema: &str) {
    admin()
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
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
