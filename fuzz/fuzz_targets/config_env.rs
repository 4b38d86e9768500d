//! `EngineConfig` / `NodeCacheConfig::from_lookup` on arbitrary bytes as
//! the value of one variable: never panics; a value that is not UTF-8 is an
//! error naming the variable; any error names its variable (and never
//! shows the Redis password); every accepted duration is a representable
//! deadline.
//! Twin: `tests/store_props.rs`
//! (`any_text_or_bytes_is_a_value_or_an_error_naming_its_variable`,
//! `every_u64_is_accepted_exactly_or_an_error_naming_its_variable`).
#![no_main]

use aegis::{cache::NodeCacheConfig, engine::EngineConfig};
use aegis_runtime::__internal::REDACTED;
use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::{Duration, Instant, SystemTime};

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

fn representable(d: Duration) {
    assert!(Instant::now().checked_add(d).is_some(), "{d:?}");
    assert!(SystemTime::now().checked_add(d).is_some(), "{d:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, value)) = data.split_first() else {
        return;
    };
    let var = VARS[usize::from(which) % VARS.len()];
    let raw = OsString::from_vec(value.to_vec());
    let lookup = |k: &str| (k == var).then(|| raw.clone());
    let err = if usize::from(which) % VARS.len() < 5 {
        match EngineConfig::from_lookup(lookup) {
            Ok(cfg) => {
                let limits = cfg.limits();
                limits.run_timeout.map(representable);
                representable(limits.shutdown_grace);
                None
            }
            Err(e) => Some(e),
        }
    } else {
        match NodeCacheConfig::from_lookup(lookup) {
            Ok(cfg) => {
                cfg.max_ttl.map(representable);
                representable(cfg.command_timeout);
                None
            }
            Err(e) => Some(e),
        }
    };
    match (err, std::str::from_utf8(value)) {
        (None, Err(_)) => panic!("{var}: a non-UTF-8 value was accepted"),
        (Some(e), Err(_)) => assert_eq!((e.variable, e.reason), (var, "is not valid UTF-8")),
        (Some(e), Ok(_)) => assert_eq!(e.variable, var),
        (None, Ok(_)) => {}
    }
    if var == "APP_NODE_CACHE_REDIS_PASSWORD"
        && let Err(e) = NodeCacheConfig::from_lookup(|k: &str| (k == var).then(|| raw.clone()))
    {
        assert_eq!(e.value, REDACTED);
    }
});
