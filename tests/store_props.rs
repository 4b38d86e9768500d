//! Property tests (the twins of the `config_env`, `connection_string` and
//! `thread_id` fuzz targets): configuration over the whole `u64` range and
//! any bytes, connection-string redaction of any password in any shape, and
//! Battalion thread ids over any parent, node and visit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::cache::CacheEntry;
use aegis::cache::EntryMisfit;
use aegis::cache::NodeCache;
use aegis::policy::CacheKeySpec;
use aegis::{
    cache::NodeCacheConfig,
    engine::{EngineConfig, MAX_CONFIG_DURATION_SECS},
    id::{
        BATTALION_SEPARATOR, NodeId, ThreadIdError, battalion_thread_id, validate_root_thread_id,
        validate_thread_id,
    },
};
use aegis_runtime::__internal::CacheLookup;
use aegis_runtime::__internal::NodeCacheHandle;
use aegis_runtime::__internal::Writer;
use aegis_runtime::__internal::derive_key;
use aegis_runtime::__internal::merge;
use aegis_runtime::__internal::redact_connection_string;
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// Every numeric variable: (name, smallest accepted, largest accepted,
/// seconds per unit if it is a duration).
const ENGINE_NUMBERS: &[(&str, u64, u64, Option<f64>)] = &[
    (
        "APP_ENGINE_RUN_TIMEOUT_SECS",
        1,
        MAX_CONFIG_DURATION_SECS,
        Some(1.0),
    ),
    ("APP_ENGINE_MAX_SUPERSTEPS", 1, u32::MAX as u64, None),
    ("APP_ENGINE_MAX_NODE_VISITS", 1, u32::MAX as u64, None),
    ("APP_ENGINE_MAX_CONCURRENCY", 1, usize::MAX as u64, None),
    (
        "APP_ENGINE_SHUTDOWN_GRACE_SECS",
        0,
        MAX_CONFIG_DURATION_SECS,
        Some(1.0),
    ),
];

const CACHE_NUMBERS: &[(&str, u64, u64, Option<f64>)] = &[
    (
        "APP_NODE_CACHE_MAX_TTL_SECS",
        1,
        MAX_CONFIG_DURATION_SECS,
        Some(1.0),
    ),
    ("APP_NODE_CACHE_MAX_ENTRIES", 1, usize::MAX as u64, None),
    (
        "APP_NODE_CACHE_COMMAND_TIMEOUT_MS",
        1,
        MAX_CONFIG_DURATION_SECS * 1_000,
        Some(0.001),
    ),
];

/// Values near every bound as well as anywhere in the range.
fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..4,
        (MAX_CONFIG_DURATION_SECS - 2)..(MAX_CONFIG_DURATION_SECS + 2),
        (MAX_CONFIG_DURATION_SECS * 1_000 - 2)..(MAX_CONFIG_DURATION_SECS * 1_000 + 2),
        (u32::MAX as u64 - 1)..(u32::MAX as u64 + 2),
        (u64::MAX - 3)..=u64::MAX,
    ]
}

fn one(var: &'static str, value: String) -> impl Fn(&str) -> Option<String> {
    move |k| (k == var).then(|| value.clone())
}

fn engine_duration(cfg: &EngineConfig, var: &str) -> Option<Duration> {
    let limits = cfg.limits();
    match var {
        "APP_ENGINE_RUN_TIMEOUT_SECS" => limits.run_timeout,
        "APP_ENGINE_SHUTDOWN_GRACE_SECS" => Some(limits.shutdown_grace),
        _ => None,
    }
}

fn engine_number(cfg: &EngineConfig, var: &str) -> u64 {
    let limits = cfg.limits();
    match var {
        "APP_ENGINE_MAX_SUPERSTEPS" => limits.max_supersteps.into(),
        "APP_ENGINE_MAX_NODE_VISITS" => limits.max_node_visits.into(),
        "APP_ENGINE_MAX_CONCURRENCY" => limits.max_concurrency as u64,
        _ => unreachable!(),
    }
}

fn cache_value(cfg: &NodeCacheConfig, var: &str) -> (Option<Duration>, u64) {
    match var {
        "APP_NODE_CACHE_MAX_TTL_SECS" => (cfg.max_ttl, 0),
        "APP_NODE_CACHE_COMMAND_TIMEOUT_MS" => (Some(cfg.command_timeout), 0),
        "APP_NODE_CACHE_MAX_ENTRIES" => (None, cfg.max_entries as u64),
        _ => unreachable!(),
    }
}

/// A duration accepted from configuration is one a deadline can be computed
/// from, on either clock.
fn representable(d: Duration) -> bool {
    Instant::now().checked_add(d).is_some() && SystemTime::now().checked_add(d).is_some()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_u64_is_accepted_exactly_or_an_error_naming_its_variable(
        n in any_u64(),
        which in 0usize..8,
        padded in any::<bool>(),
    ) {
        let text = if padded { format!(" {n}\t") } else { n.to_string() };
        if which < ENGINE_NUMBERS.len() {
            let (var, min, max, unit) = ENGINE_NUMBERS[which];
            match EngineConfig::from_lookup(one(var, text)) {
                Ok(cfg) => {
                    prop_assert!((min..=max).contains(&n), "{var}={n} accepted");
                    match unit {
                        Some(_) => {
                            let d = engine_duration(&cfg, var).unwrap();
                            prop_assert_eq!(d, Duration::from_secs(n));
                            prop_assert!(representable(d));
                        }
                        None => prop_assert_eq!(engine_number(&cfg, var), n),
                    }
                }
                Err(err) => {
                    prop_assert!(!(min..=max).contains(&n), "{var}={n}: {err}");
                    prop_assert_eq!(err.variable, var);
                    prop_assert!(err.to_string().starts_with(var));
                }
            }
        } else {
            let (var, min, max, unit) = CACHE_NUMBERS[which - ENGINE_NUMBERS.len()];
            match NodeCacheConfig::from_lookup(one(var, text)) {
                Ok(cfg) => {
                    prop_assert!((min..=max).contains(&n), "{var}={n} accepted");
                    let (d, count) = cache_value(&cfg, var);
                    match unit {
                        Some(secs) => {
                            let d = d.unwrap();
                            prop_assert_eq!(d.as_secs_f64(), n as f64 * secs);
                            prop_assert!(representable(d));
                        }
                        None => prop_assert_eq!(count, n),
                    }
                }
                Err(err) => {
                    prop_assert!(!(min..=max).contains(&n), "{var}={n}: {err}");
                    prop_assert_eq!(err.variable, var);
                }
            }
        }
    }

    #[test]
    fn any_text_or_bytes_is_a_value_or_an_error_naming_its_variable(
        bytes in proptest::collection::vec(any::<u8>(), 0..24),
        which in 0usize..13,
    ) {
        const VARS: [&str; 13] = [
            "APP_ENGINE_RUN_TIMEOUT_SECS",
            "APP_ENGINE_MAX_SUPERSTEPS",
            "APP_ENGINE_MAX_NODE_VISITS",
            "APP_ENGINE_MAX_CONCURRENCY",
            "APP_ENGINE_SHUTDOWN_GRACE_SECS",
            "APP_NODE_CACHE_ENABLED",
            "APP_NODE_CACHE_BACKEND",
            "APP_NODE_CACHE_REDIS_URL",
            "APP_NODE_CACHE_KEY_PREFIX",
            "APP_NODE_CACHE_REDIS_PASSWORD",
            "APP_NODE_CACHE_MAX_TTL_SECS",
            "APP_NODE_CACHE_MAX_ENTRIES",
            "APP_NODE_CACHE_COMMAND_TIMEOUT_MS",
        ];
        let var = VARS[which];
        #[cfg(unix)]
        let value = {
            use std::os::unix::ffi::OsStringExt;
            std::ffi::OsString::from_vec(bytes.clone())
        };
        #[cfg(not(unix))]
        let value = std::ffi::OsString::from(String::from_utf8_lossy(&bytes).into_owned());
        let lookup = |k: &str| (k == var).then(|| value.clone());
        let err = if which < 5 {
            EngineConfig::from_lookup(lookup).err()
        } else {
            NodeCacheConfig::from_lookup(lookup).err()
        };
        match (err, std::str::from_utf8(&bytes)) {
            (Some(err), Err(_)) => {
                prop_assert_eq!(err.variable, var);
                prop_assert_eq!(err.reason, "is not valid UTF-8");
            }
            (None, Err(_)) => prop_assert!(false, "{var}: non-UTF-8 accepted"),
            (Some(err), Ok(_)) => prop_assert_eq!(err.variable, var),
            (None, Ok(_)) => {}
        }
    }
}

/// A password no other part of a connection string contains: a marker,
/// then anything (the URL forms use it percent-encoded or raw).
fn password() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 !#$%&'()*+,/:;=?@\\[\\]^_`{|}~\"\\\\-]{4,24}".prop_map(|tail| format!("Zq9{tail}"))
}

fn quote_libpq(p: &str) -> String {
    format!("'{}'", p.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn percent_encode(p: &str) -> String {
    p.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The password's text as each shape carries it, and the whole string.
fn shaped(shape: usize, p: &str) -> (String, String) {
    let enc = percent_encode(p);
    match shape % 12 {
        0 => (p.into(), format!("redis://user:{p}@cache:6379/0")),
        1 => (enc.clone(), format!("redis://user:{enc}@cache:6379/0")),
        2 => (p.into(), format!("redis:/user:{p}@cache")),
        3 => (p.into(), format!("redis//:{p}@cache")),
        4 => (p.into(), format!("redis://:{p}@")),
        5 => (p.into(), format!("user:{p}@cache")),
        6 => (
            p.into(),
            format!("postgresql://app:{p}@db:5432/x?sslmode=disable"),
        ),
        7 => (
            enc.clone(),
            format!("postgres://db/x?sslmode=disable&password={enc}"),
        ),
        8 => (
            enc.clone(),
            format!("redis+unix:///tmp/r.sock?db=1&pass={enc}"),
        ),
        9 => {
            let q = quote_libpq(p);
            (q.clone(), format!("host=db user=app password={q} dbname=x"))
        }
        10 => {
            let q = quote_libpq(p);
            (q.clone(), format!("host=db password = {q}"))
        }
        _ => {
            // Unterminated: the rest of the string is taken for the value.
            (p.into(), format!("host=db password='{p}"))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn no_password_survives_redaction_in_any_shape(p in password(), shape in 0usize..12) {
        let (carried, connection) = shaped(shape, &p);
        let shown = redact_connection_string(&connection);
        prop_assert!(!shown.contains(&carried), "{connection} -> {shown}");
        prop_assert!(!shown.contains("Zq9"), "{connection} -> {shown}");
        prop_assert!(shown.contains("[REDACTED]"));
    }

    #[test]
    fn any_text_is_redacted_without_a_panic_and_no_password_value_is_left(
        s in prop_oneof![".{0,80}", "[a-z =':@/?&#\\\\]{0,40}"],
    ) {
        let shown = redact_connection_string(&s);
        let mut rest = shown.as_str();
        while let Some(i) = rest.to_ascii_lowercase().find("password=") {
            let after = rest[i + "password=".len()..].trim_start();
            prop_assert!(
                after.is_empty() || after.starts_with("[REDACTED]"),
                "{s:?} -> {shown:?}"
            );
            rest = &rest[i + 1..];
        }
    }
}

/// The inverse of `battalion_thread_id`: the root, then (node, visit) for
/// each level, as the documented grammar reads it.
fn parse(id: &str) -> (String, Vec<(String, u32)>) {
    let mut parts = id.split(BATTALION_SEPARATOR);
    let root = parts.next().unwrap().to_string();
    let levels = parts
        .map(|part| {
            let (node, visit) = match part.split_once('#') {
                Some((node, visit)) => (node, visit.parse::<u32>().unwrap()),
                None => (part, 1),
            };
            let raw = node.as_bytes();
            let mut bytes = Vec::new();
            let mut i = 0;
            while i < raw.len() {
                if raw[i] == b'%' {
                    let hex = std::str::from_utf8(&raw[i + 1..i + 3]).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                } else {
                    bytes.push(raw[i]);
                    i += 1;
                }
            }
            (String::from_utf8(bytes).unwrap(), visit)
        })
        .collect();
    (root, levels)
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z/#%>]{0,6}",
        "\\PC{0,8}",
        proptest::string::string_regex("[\\x00-\\x1f\\x7f#%>/]{1,4}").unwrap(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn battalion_children_never_collide_with_each_other_or_a_root(
        roots in proptest::collection::vec("[^>\\x00]{1,12}", 1..4),
        levels in proptest::collection::vec(
            proptest::collection::vec((piece(), 1u32..5), 1..3),
            1..24,
        ),
    ) {
        let mut named: HashMap<String, (String, Vec<(String, u32)>)> = HashMap::new();
        for (i, path) in levels.iter().enumerate() {
            let root = &roots[i % roots.len()];
            prop_assert!(validate_root_thread_id(root).is_ok());
            let mut id = root.clone();
            for (node, visit) in path {
                id = battalion_thread_id(&id, &NodeId::new(node), *visit);
            }
            let triple = (root.clone(), path.clone());
            prop_assert_eq!(&parse(&id), &triple);
            // A child never passes as a caller's id, and every child of a
            // storable root at this depth is storable.
            prop_assert!(
                matches!(validate_root_thread_id(&id), Err(ThreadIdError::Reserved { .. })),
                "{id:?}"
            );
            prop_assert!(validate_thread_id(&id).is_ok(), "{id:?}");
            prop_assert!(!roots.contains(&id));
            if let Some(other) = named.insert(id.clone(), triple.clone()) {
                prop_assert_eq!(other, triple, "{:?} names two children", id);
            }
        }
    }
}

/// A JSON value of any kind, small.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e9f64..1e9).prop_map(|x| json!(x)),
        "[a-z]{0,4}".prop_map(|s| json!(s)),
        proptest::collection::vec(any::<u8>(), 0..3).prop_map(|v| json!(v)),
        "[a-z]{1,3}".prop_map(|k| json!({ k: 1 })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Twin of the `cache_entry` fuzz target's decoding, one level up:
    /// whatever another process stored, a lookup either misses or serves a
    /// delta the merge takes, found under the key it records.
    #[test]
    fn a_cache_hit_always_merges_and_was_stored_under_its_key(
        writes in proptest::collection::btree_map(
            prop_oneof![Just("last"), Just("log"), Just("total"), Just("obj"), Just("other")],
            json_value(),
            0..4,
        ),
        copied in any::<bool>(),
    ) {
        use aegis::prelude::*;
        use std::sync::Arc;
        let f = |n: &str, rule| FieldSpec::new(FieldName::new(n).unwrap(), rule, None, false);
        let schema = BattlefieldSchema::new(vec![
            f("last", DispatchRule::LastWrite),
            f("log", DispatchRule::Append),
            f("total", DispatchRule::Sum),
            f("obj", DispatchRule::Merge),
        ]);
        let key_of = |task: &str| {
            derive_key(
                "v6:props",
                &NodeId::new("n"),
                &NodeSpec::from_fn("n", |_, _| Box::pin(async { Ok(StateDelta::new().into()) })),
                &CacheKeySpec::Default,
                &Battlefield::new(),
                Some((task, &serde_json::Value::Null)),
            )
            .unwrap()
        };
        let (key, recorded) = (key_of("a"), if copied { key_of("b") } else { key_of("a") });
        let mut delta = StateDelta::new();
        for (field, value) in &writes {
            delta.set(*field, value).unwrap();
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let lookup = rt.block_on(async {
            let backend = Arc::new(InMemoryNodeCache::new());
            let entry = CacheEntry::new(recorded, delta.clone(), SystemTime::now() + Duration::from_secs(600));
            backend.put(&key, &entry).await.unwrap();
            NodeCacheHandle::new(backend).lookup(&schema, &key).await
        });
        let merges = merge(&schema, &Battlefield::new(), [(Writer::node("n"), &delta)]).is_ok();
        match lookup {
            CacheLookup::Hit(entry) => {
                prop_assert!(!copied);
                prop_assert_eq!(&entry.key, &key);
                prop_assert!(merges, "{writes:?}");
            }
            CacheLookup::Misfit(EntryMisfit::OtherKey { .. }) => prop_assert!(copied),
            CacheLookup::Misfit(_) => prop_assert!(!merges && !copied, "{writes:?}"),
            other => prop_assert!(false, "{other:?}"),
        }
    }
}
