//! `RedisNodeCache`: a node cache shared through Redis (feature `redis-cache`).

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, IntoConnectionInfo};
use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::config::redact_url;
use super::{CacheClock, CacheEntry, CacheKey, NodeCache, NodeCacheError};

const BACKEND: &str = "redis";

/// How many keys one `SCAN` step asks for while invalidating.
const SCAN_COUNT: usize = 500;

/// A node cache in Redis, shared by every process pointed at the same server
/// and key prefix.
///
/// Each entry is the JSON of [`CacheEntry::to_bytes`] under
/// `{key_prefix}:{key}`, written with `SET .. PX` so the server drops it at
/// its expiry too (rounded up to the millisecond; the engine's re-check
/// enforces the exact boundary). Invalidation walks the keys with
/// cursor-based `SCAN .. MATCH` and removes them with `UNLINK`, never
/// `KEYS`, so a large cache never blocks the server.
///
/// The connection is one multiplexed connection behind redis-rs's
/// `ConnectionManager`, which reconnects in the background after the server
/// restarts or drops it. Every command is bounded by a command timeout
/// (default [`RedisNodeCache::DEFAULT_COMMAND_TIMEOUT`]), so a paused or unreachable server
/// turns lookups into misses instead of stalling a run.
///
/// `invalidate_all` removes every key under `{key_prefix}:`, so give
/// caches that must stay independent prefixes where neither is the other's
/// prefix followed by `:` (`app:a` and `app:b`, not `app` and `app:b`).
///
/// ```no_run
/// # async fn demo() -> Result<(), aegis_runtime::NodeCacheError> {
/// use aegis_runtime::RedisNodeCache;
/// use std::time::Duration;
///
/// let cache = RedisNodeCache::connect("redis://127.0.0.1:6379", "myapp:node-cache").await?;
/// let tuned = RedisNodeCache::builder("redis://127.0.0.1:6379", "myapp:node-cache")
///     .command_timeout(Duration::from_millis(100))
///     .connect()
///     .await?;
/// # let _ = (cache, tuned);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisNodeCache {
    conn: ConnectionManager,
    key_prefix: String,
    command_timeout: Duration,
    clock: CacheClock,
}

/// Options for [`RedisNodeCache`], from [`RedisNodeCache::builder`].
#[derive(Clone)]
pub struct RedisNodeCacheBuilder {
    url: String,
    key_prefix: String,
    password: Option<String>,
    command_timeout: Duration,
    connect_timeout: Duration,
    clock: Option<CacheClock>,
}

impl fmt::Debug for RedisNodeCacheBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNodeCacheBuilder")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field(
                "password",
                &self.password.as_ref().map(|_| crate::error::REDACTED),
            )
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl RedisNodeCacheBuilder {
    /// Authenticates with `password` (overriding one in the URL).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Bounds every command (default [`RedisNodeCache::DEFAULT_COMMAND_TIMEOUT`]).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Bounds connecting (default [`RedisNodeCache::DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Judges expiry by `clock` (default: a new [`CacheClock`]).
    pub fn clock(mut self, clock: CacheClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects. Fails if the URL is invalid, the prefix empty, or the server
    /// unreachable within the connect timeout; error messages never include
    /// the URL or the password.
    pub async fn connect(self) -> Result<RedisNodeCache, NodeCacheError> {
        if self.key_prefix.is_empty() {
            return Err(NodeCacheError::Config {
                message: "the Redis key prefix must not be empty".to_string(),
            });
        }
        let mut info =
            self.url
                .as_str()
                .into_connection_info()
                .map_err(|_| NodeCacheError::Config {
                    message: "the Redis URL is not a valid redis:// URL".to_string(),
                })?;
        if let Some(password) = &self.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info).map_err(|e| unavailable(&e))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.command_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            // Reconnection happens in the background while lookups miss;
            // keep its retries short so a recovered server is used soon.
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let conn = tokio::time::timeout(
            self.connect_timeout,
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| NodeCacheError::Timeout {
            operation: "connect",
            after: self.connect_timeout,
        })?
        .map_err(|e| unavailable(&e))?;
        Ok(RedisNodeCache {
            conn,
            key_prefix: self.key_prefix,
            command_timeout: self.command_timeout,
            clock: self.clock.unwrap_or_default(),
        })
    }
}

fn unavailable(e: &redis::RedisError) -> NodeCacheError {
    NodeCacheError::Unavailable {
        backend: BACKEND,
        message: e.to_string(),
    }
}

/// Escapes `*`, `?`, `[`, `]` and `\` for a `SCAN MATCH` glob, so a prefix
/// matches only itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedisNodeCache {
    /// How long one command may take before it counts as failed (a miss,
    /// for a lookup), unless configured otherwise.
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_millis(250);

    /// How long connecting may take, unless configured otherwise.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

    /// Connects to `url` with the default timeouts, storing entries under
    /// `{key_prefix}:{key}`.
    pub async fn connect(
        url: &str,
        key_prefix: impl Into<String>,
    ) -> Result<RedisNodeCache, NodeCacheError> {
        Self::builder(url, key_prefix).connect().await
    }

    /// Options for connecting to `url` under `key_prefix`.
    pub fn builder(url: impl Into<String>, key_prefix: impl Into<String>) -> RedisNodeCacheBuilder {
        RedisNodeCacheBuilder {
            url: url.into(),
            key_prefix: key_prefix.into(),
            password: None,
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            clock: None,
        }
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The command timeout.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn redis_key(&self, key: &CacheKey) -> String {
        format!("{}:{}", self.key_prefix, key.as_str())
    }

    /// Runs one command under the command timeout. The manager's own
    /// response timeout does not cover waiting for a reconnection in
    /// progress; this outer bound does.
    async fn run<T: FromRedisValue>(
        &self,
        operation: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, NodeCacheError> {
        let mut conn = self.conn.clone();
        self.bounded(
            operation,
            async move { cmd.query_async::<T>(&mut conn).await },
        )
        .await
    }

    async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, NodeCacheError> {
        let timeout = NodeCacheError::Timeout {
            operation,
            after: self.command_timeout,
        };
        match tokio::time::timeout(self.command_timeout, fut).await {
            Err(_) => Err(timeout),
            Ok(Err(e)) if e.is_timeout() => Err(timeout),
            Ok(Err(e)) => Err(unavailable(&e)),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The server-side id of the connection currently in use.
    #[cfg(test)]
    pub(crate) async fn client_id(&self) -> Result<i64, NodeCacheError> {
        self.run("client id", redis::cmd("CLIENT").arg("ID")).await
    }

    async fn unlink_matching(&self, pattern: &str) -> Result<u64, NodeCacheError> {
        let mut cursor: u64 = 0;
        let mut removed = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = self
                .run(
                    "scan",
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_COUNT),
                )
                .await?;
            if !keys.is_empty() {
                let n: u64 = self.run("unlink", redis::cmd("UNLINK").arg(&keys)).await?;
                removed += n;
            }
            if next == 0 {
                return Ok(removed);
            }
            cursor = next;
        }
    }
}

impl fmt::Debug for RedisNodeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNodeCache")
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl NodeCache for RedisNodeCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        let bytes: Option<Vec<u8>> = self
            .run("get", redis::cmd("GET").arg(self.redis_key(key)))
            .await?;
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        match CacheEntry::from_bytes(&bytes) {
            Ok(entry) if entry.is_fresh_at(self.clock.now()) => Ok(Some(entry)),
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::warn!(backend = BACKEND, key = %key, error = %e, "corrupt node cache entry treated as a miss");
                Ok(None)
            }
        }
    }

    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        let Some(remaining) = entry.remaining_at(self.clock.now()) else {
            return Ok(());
        };
        // Rounded up: the server must not drop an entry the clock still
        // calls fresh.
        let px = remaining.as_nanos().div_ceil(1_000_000).max(1);
        let px = u64::try_from(px).unwrap_or(u64::MAX);
        let bytes = entry.to_bytes()?;
        let _: () = self
            .run(
                "put",
                redis::cmd("SET")
                    .arg(self.redis_key(key))
                    .arg(bytes)
                    .arg("PX")
                    .arg(px),
            )
            .await?;
        Ok(())
    }

    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        let pattern = format!("{}:{}*", glob_escape(&self.key_prefix), glob_escape(prefix));
        self.unlink_matching(&pattern).await
    }

    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        self.invalidate_prefix("").await
    }

    fn clock(&self) -> Option<&CacheClock> {
        Some(&self.clock)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(glob_escape("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
        assert_eq!(glob_escape("v1:abc:"), "v1:abc:");
    }

    #[test]
    fn the_builder_debug_hides_the_password() {
        let b = RedisNodeCache::builder("redis://user:hunter2@localhost:6379/0", "p")
            .password("s3cret");
        let text = format!("{b:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("localhost:6379"), "{text}");
    }

    #[tokio::test]
    async fn bad_urls_and_prefixes_fail_without_echoing_the_url() {
        let err = RedisNodeCache::connect("http://user:hunter2@nowhere", "p")
            .await
            .unwrap_err();
        assert!(matches!(err, NodeCacheError::Config { .. }), "{err}");
        assert!(!err.to_string().contains("hunter2"));
        let err = RedisNodeCache::connect("redis://127.0.0.1:6379", "")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("prefix"));
    }

    #[tokio::test]
    async fn an_unreachable_server_fails_to_connect_within_the_timeout() {
        // Port 1 on loopback: nothing listens there, so the refusal is fast.
        let err = RedisNodeCache::builder("redis://127.0.0.1:1", "p")
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                NodeCacheError::Unavailable { .. } | NodeCacheError::Timeout { .. }
            ),
            "{err}"
        );
    }
}
