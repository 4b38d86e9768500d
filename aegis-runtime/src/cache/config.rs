//! `NodeCacheConfig`: the operator's choice of node cache backend.

use crate::error::REDACTED;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{InMemoryNodeCache, NodeCache, NodeCacheError, TtlCeiling};
use crate::engine::ConfigError;

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
/// | `APP_NODE_CACHE_MAX_TTL_SECS` | `max_ttl` | whole seconds (> 0): the TTL ceiling |
/// | `APP_NODE_CACHE_MAX_ENTRIES` | `max_entries` | > 0; the in-memory bound, default 10,000 |
/// | `APP_NODE_CACHE_COMMAND_TIMEOUT_MS` | `command_timeout` | > 0; Redis, default 250 |
///
/// An unset variable keeps the default; a malformed one is a [`ConfigError`]
/// naming it (a URL shown with its credentials redacted), never a silent
/// default. `Debug` never prints `redis_password`, nor a password inside
/// `redis_url`.
///
/// The per-node policies (which nodes are cached, their TTL and key) are
/// code, never configuration: there is no variable for them, on purpose.
///
/// ```
/// use aegis_runtime::NodeCacheConfig;
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
/// # Ok::<(), aegis_runtime::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
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
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
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

/// `url` with any userinfo (`user:password@`) replaced by a placeholder.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{REDACTED}{}", &rest[at..]),
        None => url.to_string(),
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

fn positive<T: std::str::FromStr + PartialEq + Default>(
    lookup: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<Option<T>, ConfigError> {
    let Some(raw) = lookup(variable) else {
        return Ok(None);
    };
    let v: T = raw.trim().parse().map_err(|_| ConfigError {
        variable,
        value: raw.clone(),
        reason: "expected a whole number greater than zero",
    })?;
    if v == T::default() {
        return Err(ConfigError {
            variable,
            value: raw,
            reason: "must be greater than zero",
        });
    }
    Ok(Some(v))
}

impl NodeCacheConfig {
    /// The default Redis key prefix.
    pub const DEFAULT_KEY_PREFIX: &str = "aegis:node-cache";

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the `APP_NODE_CACHE_*` variables through `lookup` (a map in
    /// tests, the environment in [`NodeCacheConfig::from_env`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut cfg = NodeCacheConfig::default();
        if let Some(raw) = lookup(ENABLED) {
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
        if let Some(raw) = lookup(BACKEND) {
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
        if let Some(raw) = lookup(REDIS_URL) {
            let url = raw.trim();
            let scheme_ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
                .iter()
                .any(|s| url.starts_with(s));
            if !scheme_ok || url.len() <= url.find("://").map_or(0, |i| i + 3) {
                return Err(ConfigError {
                    variable: REDIS_URL,
                    value: redact_url(url),
                    reason: "expected a redis://, rediss:// or unix:// URL",
                });
            }
            cfg.redis_url = Some(url.to_string());
        }
        if let Some(raw) = lookup(KEY_PREFIX) {
            if raw.trim().is_empty() {
                return Err(ConfigError {
                    variable: KEY_PREFIX,
                    value: raw,
                    reason: "must not be empty",
                });
            }
            cfg.key_prefix = raw.trim().to_string();
        }
        cfg.redis_password = lookup(REDIS_PASSWORD).filter(|p| !p.is_empty());
        if let Some(secs) = positive::<u64>(&lookup, MAX_TTL_SECS)? {
            cfg.max_ttl = Some(Duration::from_secs(secs));
        }
        if let Some(n) = positive::<usize>(&lookup, MAX_ENTRIES)? {
            cfg.max_entries = n;
        }
        if let Some(ms) = positive::<u64>(&lookup, COMMAND_TIMEOUT_MS)? {
            cfg.command_timeout = Duration::from_millis(ms);
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
            (
                MAX_TTL_SECS,
                "1h",
                "expected a whole number greater than zero",
            ),
            (
                MAX_ENTRIES,
                "-5",
                "expected a whole number greater than zero",
            ),
            (COMMAND_TIMEOUT_MS, "0", "must be greater than zero"),
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
    fn urls_are_redacted_only_where_they_carry_userinfo() {
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact_url("redis://:pw@h:1"), "redis://[REDACTED]@h:1");
        assert_eq!(
            redact_url("redis://u:p@h/0?x=a@b"),
            "redis://[REDACTED]@h/0?x=a@b"
        );
        assert_eq!(redact_url("u:p@h"), "[REDACTED]@h");
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
