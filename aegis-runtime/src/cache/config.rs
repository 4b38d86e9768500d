//! `NodeCacheConfig`: the operator's choice of node cache backend.

use crate::error::{REDACTED, redact_connection_string};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{InMemoryNodeCache, NodeCache, NodeCacheError, TtlCeiling};
use crate::config::{ConfigError, DurationUnit, Env, EnvValue};

/// The default Redis command timeout, in milliseconds.
const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 250;

/// Which backend a [`NodeCacheConfig`] builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeCacheBackend {
    /// [`InMemoryNodeCache`]: process-local, bounded.
    #[default]
    InMemory,
    /// `RedisNodeCache` (needs the `redis-cache` feature).
    Redis,
}

/// Operator configuration of the engine's node cache, off by default.
///
/// | variable | field | value |
/// |---|---|---|
/// | `APP_NODE_CACHE_ENABLED` | `enabled` | `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`) |
/// | `APP_NODE_CACHE_BACKEND` | `backend` | `memory` or `redis` |
/// | `APP_NODE_CACHE_REDIS_URL` | `redis_url` | `redis://host:port/db`; required for `redis` |
/// | `APP_NODE_CACHE_KEY_PREFIX` | `key_prefix` | non-empty; default `aegis:node-cache` |
/// | `APP_NODE_CACHE_REDIS_PASSWORD` | `redis_password` | any string |
/// | `APP_NODE_CACHE_MAX_TTL_SECS` | `max_ttl` | whole seconds (> 0, at most 100 years): the TTL ceiling |
/// | `APP_NODE_CACHE_MAX_ENTRIES` | `max_entries` | > 0; the in-memory bound, default 10,000 |
/// | `APP_NODE_CACHE_COMMAND_TIMEOUT_MS` | `command_timeout` | > 0, at most 100 years; Redis, default 250 |
///
/// An unset variable keeps the default; a malformed one is a [`ConfigError`]
/// naming it, never a silent default: a value that is not UTF-8, not a
/// whole number, out of range, or a duration past
/// [`MAX_CONFIG_DURATION_SECS`](crate::config::MAX_CONFIG_DURATION_SECS) (so every
/// accepted TTL ceiling and timeout is a representable deadline). A URL is
/// shown with its credentials redacted
/// ([`redact_connection_string`]), even a
/// malformed one, and the password variable is never shown. `Debug` never
/// prints `redis_password`, nor a password inside `redis_url`.
///
/// The per-node policies (which nodes are cached, their TTL and key) are
/// code, never configuration: there is no variable for them, on purpose.
///
/// ```
/// use aegis_runtime::cache::NodeCacheConfig;
///
/// let env = |k: &str| match k {
///     "APP_NODE_CACHE_ENABLED" => Some("true".to_string()),
///     "APP_NODE_CACHE_MAX_ENTRIES" => Some("500".to_string()),
///     _ => None,
/// };
/// let config = NodeCacheConfig::from_lookup(env)?;
/// assert!(config.enabled);
/// assert_eq!(config.max_entries, 500);
/// // `config.build().await?` is then `Some(Arc<dyn NodeCache>)`, for
/// // `WarEngine::with_node_cache`.
/// # Ok::<(), aegis_runtime::engine::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCacheConfig {
    /// Whether the engine gets a node cache at all (default `false`).
    pub enabled: bool,
    /// Which backend.
    pub backend: NodeCacheBackend,
    /// The Redis server, for [`NodeCacheBackend::Redis`].
    pub redis_url: Option<String>,
    /// Redis keys are `{key_prefix}:{key}`.
    pub key_prefix: String,
    /// The Redis password, overriding one in the URL. Never printed.
    pub redis_password: Option<String>,
    /// The TTL ceiling: no entry outlives this, whatever its node asked.
    pub max_ttl: Option<Duration>,
    /// The in-memory backend's bound on entries.
    pub max_entries: usize,
    /// The bound on each Redis command; a lookup slower than this is a miss.
    pub command_timeout: Duration,
}

impl NodeCacheConfig {
    /// Sets [`enabled`](Self::enabled): whether the engine gets a node cache at all
    /// (default `false`).
    #[must_use]
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets [`backend`](Self::backend): which backend.
    #[must_use]
    pub fn with_backend(mut self, backend: NodeCacheBackend) -> Self {
        self.backend = backend;
        self
    }

    /// Sets [`redis_url`](Self::redis_url): the Redis server, for
    /// [`NodeCacheBackend::Redis`].
    #[must_use]
    pub fn with_redis_url(mut self, redis_url: Option<impl Into<String>>) -> Self {
        self.redis_url = redis_url.map(Into::into);
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix): redis keys are `{key_prefix}:{key}`.
    #[must_use]
    pub fn with_key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.key_prefix = key_prefix.into();
        self
    }

    /// Sets [`redis_password`](Self::redis_password): the Redis password,
    /// overriding one in the URL.
    #[must_use]
    pub fn with_redis_password(mut self, redis_password: Option<impl Into<String>>) -> Self {
        self.redis_password = redis_password.map(Into::into);
        self
    }

    /// Sets [`max_ttl`](Self::max_ttl): the TTL ceiling: no entry outlives this,
    /// whatever its node asked.
    #[must_use]
    pub fn with_max_ttl(mut self, max_ttl: impl Into<Option<Duration>>) -> Self {
        self.max_ttl = max_ttl.into();
        self
    }

    /// Sets [`max_entries`](Self::max_entries): the in-memory backend's bound on
    /// entries.
    #[must_use]
    pub fn with_max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries;
        self
    }

    /// Sets [`command_timeout`](Self::command_timeout): the bound on each Redis
    /// command; a lookup slower than this is a miss.
    #[must_use]
    pub fn with_command_timeout(mut self, command_timeout: Duration) -> Self {
        self.command_timeout = command_timeout;
        self
    }
}

impl Default for NodeCacheConfig {
    /// Off; in-memory when enabled, 10,000 entries, no ceiling.
    fn default() -> Self {
        NodeCacheConfig {
            enabled: false,
            backend: NodeCacheBackend::InMemory,
            redis_url: None,
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_string(),
            redis_password: None,
            max_ttl: None,
            max_entries: InMemoryNodeCache::DEFAULT_MAX_ENTRIES,
            command_timeout: Duration::from_millis(DEFAULT_COMMAND_TIMEOUT_MS),
        }
    }
}

impl fmt::Debug for NodeCacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCacheConfig")
            .field("enabled", &self.enabled)
            .field("backend", &self.backend)
            .field(
                "redis_url",
                &self.redis_url.as_deref().map(redact_connection_string),
            )
            .field("key_prefix", &self.key_prefix)
            .field(
                "redis_password",
                &self.redis_password.as_ref().map(|_| REDACTED),
            )
            .field("max_ttl", &self.max_ttl)
            .field("max_entries", &self.max_entries)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

const ENABLED: &str = "APP_NODE_CACHE_ENABLED";
const BACKEND: &str = "APP_NODE_CACHE_BACKEND";
const REDIS_URL: &str = "APP_NODE_CACHE_REDIS_URL";
const KEY_PREFIX: &str = "APP_NODE_CACHE_KEY_PREFIX";
const REDIS_PASSWORD: &str = "APP_NODE_CACHE_REDIS_PASSWORD";
const MAX_TTL_SECS: &str = "APP_NODE_CACHE_MAX_TTL_SECS";
const MAX_ENTRIES: &str = "APP_NODE_CACHE_MAX_ENTRIES";
const COMMAND_TIMEOUT_MS: &str = "APP_NODE_CACHE_COMMAND_TIMEOUT_MS";

impl NodeCacheConfig {
    /// The default Redis key prefix.
    pub const DEFAULT_KEY_PREFIX: &str = "aegis:node-cache";

    /// Reads the process environment (`std::env::var_os`, so a value that
    /// is not UTF-8 is reported, not skipped).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k: &str| std::env::var_os(k))
    }

    /// Reads the `APP_NODE_CACHE_*` variables through `lookup`: a map in
    /// tests (returning `String` or `&str`), the environment in
    /// [`NodeCacheConfig::from_env`] (returning `OsString`). See
    /// [`EnvValue`].
    pub fn from_lookup<V: Into<EnvValue>>(
        lookup: impl Fn(&str) -> Option<V>,
    ) -> Result<Self, ConfigError> {
        let env = Env(lookup);
        let mut cfg = NodeCacheConfig::default();
        if let Some(raw) = env.text(ENABLED)? {
            cfg.enabled = match raw.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    return Err(ConfigError {
                        variable: ENABLED,
                        value: raw,
                        reason: "expected true or false",
                    });
                }
            };
        }
        if let Some(raw) = env.text(BACKEND)? {
            cfg.backend = match raw.trim().to_ascii_lowercase().as_str() {
                "memory" | "in-memory" | "in_memory" | "inmemory" => NodeCacheBackend::InMemory,
                "redis" => NodeCacheBackend::Redis,
                _ => {
                    return Err(ConfigError {
                        variable: BACKEND,
                        value: raw,
                        reason: "expected `memory` or `redis`",
                    });
                }
            };
        }
        let url = env.read(REDIS_URL, |raw| {
            redact_connection_string(&raw.to_string_lossy())
        })?;
        if let Some(raw) = url {
            let url = raw.trim();
            let scheme_ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
                .iter()
                .any(|s| url.starts_with(s));
            if !scheme_ok || url.len() <= url.find("://").map_or(0, |i| i + 3) {
                return Err(ConfigError {
                    variable: REDIS_URL,
                    value: redact_connection_string(url),
                    reason: "expected a redis://, rediss:// or unix:// URL",
                });
            }
            cfg.redis_url = Some(url.to_string());
        }
        if let Some(raw) = env.text(KEY_PREFIX)? {
            if raw.trim().is_empty() {
                return Err(ConfigError {
                    variable: KEY_PREFIX,
                    value: raw,
                    reason: "must not be empty",
                });
            }
            cfg.key_prefix = raw.trim().to_string();
        }
        cfg.redis_password = env.secret(REDIS_PASSWORD)?.filter(|p| !p.is_empty());
        if let Some(ttl) = env.duration(MAX_TTL_SECS, DurationUnit::Secs, 1)? {
            cfg.max_ttl = Some(ttl);
        }
        if let Some(n) = env.number::<usize>(MAX_ENTRIES, 1)? {
            cfg.max_entries = n;
        }
        if let Some(timeout) = env.duration(COMMAND_TIMEOUT_MS, DurationUnit::Millis, 1)? {
            cfg.command_timeout = timeout;
        }
        if cfg.enabled && cfg.backend == NodeCacheBackend::Redis && cfg.redis_url.is_none() {
            return Err(ConfigError {
                variable: REDIS_URL,
                value: String::new(),
                reason: "required when APP_NODE_CACHE_BACKEND is redis",
            });
        }
        Ok(cfg)
    }

    /// Builds the configured backend, capped by `max_ttl` when set, ready
    /// for `WarEngine::with_node_cache`; `None` when the cache is disabled.
    ///
    /// The Redis backend connects here, and fails if the server is
    /// unreachable, or if this build lacks the `redis-cache` feature.
    pub async fn build(&self) -> Result<Option<Arc<dyn NodeCache>>, NodeCacheError> {
        if !self.enabled {
            return Ok(None);
        }
        let backend: Arc<dyn NodeCache> = match self.backend {
            NodeCacheBackend::InMemory => {
                Arc::new(InMemoryNodeCache::new().with_max_entries(self.max_entries))
            }
            NodeCacheBackend::Redis => self.build_redis().await?,
        };
        Ok(Some(match self.max_ttl {
            Some(ceiling) => Arc::new(TtlCeiling::new(backend, ceiling)),
            None => backend,
        }))
    }

    #[cfg(feature = "redis-cache")]
    async fn build_redis(&self) -> Result<Arc<dyn NodeCache>, NodeCacheError> {
        let url = self
            .redis_url
            .as_deref()
            .ok_or_else(|| NodeCacheError::Config {
                message: format!("the redis backend needs {REDIS_URL}"),
            })?;
        let mut builder = super::RedisNodeCache::builder(url, self.key_prefix.clone())
            .command_timeout(self.command_timeout);
        if let Some(password) = &self.redis_password {
            builder = builder.password(password.clone());
        }
        Ok(Arc::new(builder.connect().await?))
    }

    #[cfg(not(feature = "redis-cache"))]
    async fn build_redis(&self) -> Result<Arc<dyn NodeCache>, NodeCacheError> {
        Err(NodeCacheError::Config {
            message: "the redis backend needs aegis built with the `redis-cache` feature"
                .to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn off_by_default() {
        let cfg = NodeCacheConfig::from_lookup(lookup(&[])).unwrap();
        assert_eq!(cfg, NodeCacheConfig::default());
        assert!(!cfg.enabled);
        assert_eq!(cfg.backend, NodeCacheBackend::InMemory);
    }

    #[test]
    fn reads_every_variable() {
        let cfg = NodeCacheConfig::from_lookup(lookup(&[
            (ENABLED, "yes"),
            (BACKEND, "redis"),
            (REDIS_URL, "redis://cache.internal:6380/2"),
            (KEY_PREFIX, "svc:nc"),
            (REDIS_PASSWORD, "hunter2"),
            (MAX_TTL_SECS, "3600"),
            (MAX_ENTRIES, "77"),
            (COMMAND_TIMEOUT_MS, "40"),
        ]))
        .unwrap();
        assert_eq!(
            cfg,
            NodeCacheConfig {
                enabled: true,
                backend: NodeCacheBackend::Redis,
                redis_url: Some("redis://cache.internal:6380/2".into()),
                key_prefix: "svc:nc".into(),
                redis_password: Some("hunter2".into()),
                max_ttl: Some(Duration::from_secs(3600)),
                max_entries: 77,
                command_timeout: Duration::from_millis(40),
            }
        );
    }

    #[test]
    fn malformed_values_name_their_variable() {
        for (var, value, reason) in [
            (ENABLED, "maybe", "expected true or false"),
            (BACKEND, "memcached", "expected `memory` or `redis`"),
            (
                REDIS_URL,
                "http://x",
                "expected a redis://, rediss:// or unix:// URL",
            ),
            (
                REDIS_URL,
                "redis://",
                "expected a redis://, rediss:// or unix:// URL",
            ),
            (KEY_PREFIX, "  ", "must not be empty"),
            (MAX_TTL_SECS, "0", "must be greater than zero"),
            (MAX_TTL_SECS, "1h", "expected a whole non-negative number"),
            (MAX_ENTRIES, "-5", "expected a whole non-negative number"),
            (COMMAND_TIMEOUT_MS, "0", "must be greater than zero"),
            (
                MAX_TTL_SECS,
                "18446744073709551615",
                "must be at most 3153600000 seconds (100 years); leave it unset for the default",
            ),
            (
                MAX_TTL_SECS,
                "18446744073709551616",
                "is too large for this setting",
            ),
            (
                COMMAND_TIMEOUT_MS,
                "3153600000001",
                "must be at most 3153600000000 milliseconds (100 years); leave it unset for the default",
            ),
            (
                MAX_ENTRIES,
                "18446744073709551616",
                "is too large for this setting",
            ),
        ] {
            let err = NodeCacheConfig::from_lookup(lookup(&[(var, value)])).unwrap_err();
            assert_eq!((err.variable, err.reason), (var, reason), "{var}={value}");
            assert!(err.to_string().starts_with(var), "{err}");
        }
        let err = NodeCacheConfig::from_lookup(lookup(&[(ENABLED, "1"), (BACKEND, "redis")]))
            .unwrap_err();
        assert_eq!(err.variable, REDIS_URL);
        // A Redis URL without a server is fine while the cache is off.
        assert!(NodeCacheConfig::from_lookup(lookup(&[(BACKEND, "redis")])).is_ok());
    }

    #[test]
    fn secrets_never_reach_debug_or_errors() {
        let cfg = NodeCacheConfig::from_lookup(lookup(&[
            (REDIS_URL, "redis://admin:url-secret@cache:6379/0"),
            (REDIS_PASSWORD, "pw-secret"),
        ]))
        .unwrap();
        let text = format!("{cfg:?}");
        assert!(
            !text.contains("pw-secret") && !text.contains("url-secret"),
            "{text}"
        );
        assert!(
            text.contains("redis_password: Some(\"[REDACTED]\")"),
            "{text}"
        );
        assert!(text.contains("redis://[REDACTED]@cache:6379/0"), "{text}");

        let err = NodeCacheConfig::from_lookup(lookup(&[(REDIS_URL, "http://u:url-secret@h")]))
            .unwrap_err();
        assert!(!err.to_string().contains("url-secret"), "{err}");
    }

    #[test]
    fn malformed_urls_lose_their_password_in_errors_and_debug() {
        for url in [
            "redis:/user:url-secret@host",
            "redis//:url-secret@host",
            "redis://:url-secret@",
            "user:url-secret@host",
            "http://u:url-secret@h",
            "redis:/u:url%2Dsecret@h",
            "redis+unix:///tmp/r.sock?pass=url-secret",
        ] {
            let shown = match NodeCacheConfig::from_lookup(lookup(&[(REDIS_URL, url)])) {
                Err(err) => {
                    assert_eq!(err.variable, REDIS_URL);
                    err.to_string()
                }
                Ok(cfg) => format!("{cfg:?}"),
            };
            assert!(
                !shown.contains("url-secret") && !shown.contains("url%2Dsecret"),
                "{url}: {shown}"
            );
            assert!(shown.contains(REDACTED), "{url}: {shown}");
        }
        // Set directly, bypassing the parser, it is still hidden.
        let cfg = NodeCacheConfig {
            redis_url: Some("redis//:field-secret@h".into()),
            ..NodeCacheConfig::default()
        };
        assert!(!format!("{cfg:?}").contains("field-secret"));
    }

    #[test]
    fn durations_up_to_a_hundred_years_are_representable_deadlines() {
        let cfg = NodeCacheConfig::from_lookup(lookup(&[
            (MAX_TTL_SECS, "3153600000"),
            (COMMAND_TIMEOUT_MS, "3153600000000"),
            (MAX_ENTRIES, "18446744073709551615"),
        ]))
        .unwrap();
        let longest = Duration::from_secs(crate::config::MAX_CONFIG_DURATION_SECS);
        assert_eq!(cfg.max_ttl, Some(longest));
        assert_eq!(cfg.command_timeout, longest);
        assert_eq!(cfg.max_entries as u64, u64::MAX);
        assert!(std::time::SystemTime::now().checked_add(longest).is_some());
        assert!(std::time::Instant::now().checked_add(longest).is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_value_that_is_not_utf8_is_an_error_never_a_default() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let bad = |prefix: &[u8]| {
            let mut bytes = prefix.to_vec();
            bytes.push(0xff);
            OsString::from_vec(bytes)
        };
        for var in [
            ENABLED,
            BACKEND,
            REDIS_URL,
            KEY_PREFIX,
            REDIS_PASSWORD,
            MAX_TTL_SECS,
            MAX_ENTRIES,
            COMMAND_TIMEOUT_MS,
        ] {
            let value = match var {
                REDIS_URL => bad(b"redis://:pw-secret@h/"),
                REDIS_PASSWORD => bad(b"pw-secret"),
                _ => bad(b"1"),
            };
            let err = NodeCacheConfig::from_lookup(|k: &str| (k == var).then(|| value.clone()))
                .unwrap_err();
            assert_eq!((err.variable, err.reason), (var, "is not valid UTF-8"));
            assert!(!err.to_string().contains("pw-secret"), "{err}");
        }
        let err = NodeCacheConfig::from_lookup(|k: &str| {
            (k == REDIS_PASSWORD).then(|| bad(b"pw-secret"))
        })
        .unwrap_err();
        assert_eq!(err.value, REDACTED);
    }

    #[tokio::test]
    async fn builds_nothing_when_off_and_the_bounded_memory_backend_when_on() {
        assert!(NodeCacheConfig::default().build().await.unwrap().is_none());
        let cfg = NodeCacheConfig {
            enabled: true,
            max_ttl: Some(Duration::from_secs(5)),
            ..NodeCacheConfig::default()
        };
        let cache = cfg.build().await.unwrap().unwrap();
        assert_eq!(cache.backend_name(), "memory");
    }

    #[cfg(not(feature = "redis-cache"))]
    #[tokio::test]
    async fn redis_without_the_feature_is_a_clear_error() {
        let cfg = NodeCacheConfig {
            enabled: true,
            backend: NodeCacheBackend::Redis,
            redis_url: Some("redis://127.0.0.1:6379".into()),
            ..NodeCacheConfig::default()
        };
        let err = cfg.build().await.err().unwrap();
        assert!(err.to_string().contains("redis-cache"), "{err}");
    }

    #[cfg(feature = "redis-cache")]
    #[tokio::test]
    async fn builds_a_connected_redis_backend() {
        let _server = crate::cache::contract::on_redis::share_server().await;
        let cfg = NodeCacheConfig {
            enabled: true,
            backend: NodeCacheBackend::Redis,
            redis_url: Some("redis://127.0.0.1:6379".into()),
            key_prefix: format!("aegis-test:config:{}", std::process::id()),
            ..NodeCacheConfig::default()
        };
        let cache = cfg.build().await.unwrap_or_else(|e| {
            panic!("Redis at 127.0.0.1:6379 is unreachable ({e}); the redis-cache tests need it")
        });
        assert_eq!(cache.unwrap().backend_name(), "redis");
    }
}
