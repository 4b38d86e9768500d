//! `RedisNodeCache`: a node cache shared through Redis (feature `redis-cache`).

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, IntoConnectionInfo};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{CacheClock, CacheEntry, CacheKey, NodeCache, NodeCacheError};
use crate::error::{redact_connection_string, scrub_values};

const BACKEND: &str = "redis";

/// The longest expiry handed to the server, in milliseconds: 100 years.
const MAX_SERVER_TTL_MS: u128 = crate::config::MAX_CONFIG_DURATION_SECS as u128 * 1_000;

/// How many keys one `SCAN` step asks for while invalidating.
const SCAN_COUNT: usize = 500;

/// A node cache in Redis, shared by every process pointed at the same server
/// and key prefix.
///
/// Each entry is the JSON of [`CacheEntry::to_bytes`] under
/// `{key_prefix}:{key}`, written with `SET .. PX` so the server drops it at
/// its expiry too (rounded up to the millisecond, at most 100 years; the
/// engine's re-check enforces the exact boundary). A lookup reads at most
/// [`RedisNodeCacheBuilder::max_entry_bytes`] of it, so another process
/// sharing the server cannot make a lookup read without limit. Invalidation walks the keys with
/// cursor-based `SCAN .. MATCH` and removes them with `UNLINK`, never
/// `KEYS`, so a large cache never blocks the server.
///
/// The connection is one multiplexed connection behind redis-rs's
/// `ConnectionManager`, which reconnects in the background after the server
/// restarts or drops it. Every command is bounded by a command timeout
/// (default [`RedisNodeCache::DEFAULT_COMMAND_TIMEOUT`]), so a paused or unreachable server
/// turns lookups into misses instead of stalling a run.
///
/// The cache is best effort from the start: when the server cannot be
/// reached at [`RedisNodeCacheBuilder::connect`], the cache is returned
/// anyway, serves misses (and stores nothing), and keeps connecting in the
/// background (backing off to one try every five seconds) until the server
/// answers; a `warn` event says it started without Redis, an `info` event
/// when it connected. Only what no retry can fix fails `connect`: an
/// invalid URL, an empty prefix, a password the server refuses.
///
/// `invalidate_all` removes every key under `{key_prefix}:`, so give
/// caches that must stay independent prefixes where neither is the other's
/// prefix followed by `:` (`app:a` and `app:b`, not `app` and `app:b`).
///
/// ```no_run
/// # async fn demo() -> Result<(), aegis_runtime::cache::NodeCacheError> {
/// use aegis_runtime::cache::RedisNodeCache;
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
    /// Empty until the first connection succeeds: at start, or later in
    /// the background when the server was away at start.
    conn: Arc<OnceLock<ConnectionManager>>,
    key_prefix: String,
    command_timeout: Duration,
    max_entry_bytes: usize,
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
    max_entry_bytes: usize,
    clock: Option<CacheClock>,
}

impl fmt::Debug for RedisNodeCacheBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNodeCacheBuilder")
            .field("url", &redact_connection_string(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field(
                "password",
                &self.password.as_ref().map(|_| crate::error::REDACTED),
            )
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_entry_bytes", &self.max_entry_bytes)
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

    /// Bounds the stored size of one entry (default
    /// [`RedisNodeCache::DEFAULT_MAX_ENTRY_BYTES`], at least 1). A larger
    /// entry is not stored (the store fails, which the engine logs), and
    /// one found larger, written by another process, is read no further
    /// than the bound and is a miss: a shared server cannot make a lookup
    /// read without limit.
    pub fn max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes.max(1);
        self
    }

    /// Judges expiry by `clock` (default: a new [`CacheClock`]).
    pub fn clock(mut self, clock: CacheClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects, or starts connecting in the background when the server
    /// cannot be reached within the connect timeout (see
    /// [`RedisNodeCache`]). Fails if the URL is invalid, the prefix empty,
    /// or the server refuses the credentials; error messages show the URL
    /// only with its credentials redacted, and never the password.
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
                    message: format!(
                        "the Redis URL `{}` is not a valid redis:// URL",
                        redact_connection_string(&self.url)
                    ),
                })?;
        if let Some(password) = &self.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        // Whatever the client or the server says is scrubbed of both
        // passwords it may know.
        let url_password = info.redis_settings().password().map(str::to_string);
        let secrets = [self.password.as_deref(), url_password.as_deref()];
        let unavailable = |e: &redis::RedisError| NodeCacheError::Unavailable {
            backend: BACKEND,
            message: scrub_values(&e.to_string(), secrets.into_iter().flatten()),
        };
        let client = redis::Client::open(info).map_err(|e| unavailable(&e))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.command_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            // Reconnection happens in the background while lookups miss;
            // keep its retries short so a recovered server is used soon.
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let conn = Arc::new(OnceLock::new());
        let first = tokio::time::timeout(
            self.connect_timeout,
            client.get_connection_manager_with_config(config.clone()),
        )
        .await;
        match first {
            Ok(Ok(manager)) => {
                let _ = conn.set(manager);
            }
            // Reached, and refused: no retry will change that.
            Ok(Err(e)) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                return Err(unavailable(&e));
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => unavailable(&e).to_string(),
                    _ => format!("no answer within {:?}", self.connect_timeout),
                };
                tracing::warn!(
                    backend = BACKEND,
                    url = %redact_connection_string(&self.url),
                    error = %scrub_values(&why, secrets.into_iter().flatten()),
                    "aegis node cache: Redis is unreachable; serving misses and connecting in the background"
                );
                tokio::spawn(connect_in_background(
                    client,
                    config,
                    self.connect_timeout,
                    Arc::downgrade(&conn),
                    redact_connection_string(&self.url),
                ));
            }
        }
        Ok(RedisNodeCache {
            conn,
            key_prefix: self.key_prefix,
            command_timeout: self.command_timeout,
            max_entry_bytes: self.max_entry_bytes,
            clock: self.clock.unwrap_or_default(),
        })
    }
}

/// Tries to connect until it succeeds or every cache sharing `slot` is
/// dropped, backing off from 50 ms to 5 s between tries.
async fn connect_in_background(
    client: redis::Client,
    config: ConnectionManagerConfig,
    connect_timeout: Duration,
    slot: std::sync::Weak<OnceLock<ConnectionManager>>,
    url: String,
) {
    let mut delay = Duration::from_millis(50);
    loop {
        tokio::time::sleep(delay).await;
        if slot.strong_count() == 0 {
            return;
        }
        let tried = tokio::time::timeout(
            connect_timeout,
            client.get_connection_manager_with_config(config.clone()),
        )
        .await;
        if let Ok(Ok(manager)) = tried {
            if let Some(slot) = slot.upgrade() {
                let _ = slot.set(manager);
                tracing::info!(backend = BACKEND, %url, "aegis node cache: connected to Redis");
            }
            return;
        }
        delay = delay.saturating_mul(2).min(Duration::from_secs(5));
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

    /// The largest entry stored or read, unless configured otherwise:
    /// 64 MiB.
    pub const DEFAULT_MAX_ENTRY_BYTES: usize = 64 * 1024 * 1024;

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
            max_entry_bytes: Self::DEFAULT_MAX_ENTRY_BYTES,
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
        format!("{}:{key}", self.key_prefix)
    }

    /// Runs one command under the command timeout. The manager's own
    /// response timeout does not cover waiting for a reconnection in
    /// progress; this outer bound does.
    async fn run<T: FromRedisValue>(
        &self,
        operation: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, NodeCacheError> {
        let Some(conn) = self.conn.get() else {
            return Err(NodeCacheError::Unavailable {
                backend: BACKEND,
                message: "not connected yet (Redis was unreachable; connecting in the background)"
                    .to_string(),
            });
        };
        let mut conn = conn.clone();
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
            .field("max_entry_bytes", &self.max_entry_bytes)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl NodeCache for RedisNodeCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        // At most one byte past the bound: enough to tell an oversized
        // entry (another process's) from one that fits. A missing key reads
        // as empty, which no entry is.
        let bytes: Vec<u8> = self
            .run(
                "get",
                redis::cmd("GETRANGE")
                    .arg(self.redis_key(key))
                    .arg(0)
                    .arg(self.max_entry_bytes),
            )
            .await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        if bytes.len() > self.max_entry_bytes {
            tracing::warn!(backend = BACKEND, key = %key, max_entry_bytes = self.max_entry_bytes, "oversized node cache entry treated as a miss");
            return Ok(None);
        }
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
        // calls fresh. Capped: Redis refuses an expiry past its clock's
        // range, and an entry living a century is as good as forever (the
        // engine still enforces the entry's own expiry on every hit).
        let px = remaining
            .as_nanos()
            .div_ceil(1_000_000)
            .clamp(1, MAX_SERVER_TTL_MS);
        let px = u64::try_from(px).unwrap_or(u64::MAX);
        let bytes = entry.to_bytes()?;
        if bytes.len() > self.max_entry_bytes {
            return Err(NodeCacheError::Encode {
                message: format!(
                    "the entry is {} bytes, over this cache's bound of {} bytes",
                    bytes.len(),
                    self.max_entry_bytes
                ),
            });
        }
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
    async fn malformed_urls_never_show_their_password() {
        for url in [
            "redis:/user:hunter2@host",
            "redis//:hunter2@host",
            "redis://:hunter2@",
            "user:hunter2@host",
            "redis://u:hunt%65r2@host:notaport",
            "redis://u:hunter2@ho st:1",
        ] {
            let builder = RedisNodeCache::builder(url, "p").password("s3cret");
            let debug = format!("{builder:?}");
            let shown = match builder
                .connect_timeout(Duration::from_millis(200))
                .connect()
                .await
            {
                Err(e) => format!("{debug} {e} {e:?}"),
                Ok(cache) => format!("{debug} {cache:?}"),
            };
            for secret in ["hunter2", "hunt%65r2", "s3cret"] {
                assert!(!shown.contains(secret), "{url}: {shown}");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_password_is_an_error_without_the_password() {
        let _server = crate::cache::contract::on_redis::share_server().await;
        // The test server has no password: AUTH itself is refused.
        let result = RedisNodeCache::builder("redis://:url-pw-secret@127.0.0.1:6379", "p")
            .password("builder-pw-secret")
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await;
        let Err(err) = result else {
            panic!("AUTH against a server without a password must fail");
        };
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("pw-secret"), "{shown}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_longest_timeouts_and_expiries_work() {
        let _server = crate::cache::contract::on_redis::share_server().await;
        let cache = RedisNodeCache::builder(
            crate::cache::contract::on_redis::URL,
            crate::cache::contract::on_redis::unique_prefix("max-timeouts"),
        )
        .command_timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .connect()
        .await
        .unwrap();
        let key = CacheKey::from_raw("k");
        let entry = CacheEntry::new(
            key.clone(),
            crate::state::StateDelta::new(),
            cache.clock.now() + Duration::from_secs(60),
        );
        cache.put(&key, &entry).await.unwrap();
        assert_eq!(cache.get(&key).await.unwrap(), Some(entry));
        // An expiry past what Redis's clock takes is stored, capped
        // server-side, and read back with its own expiry.
        let far = CacheKey::from_raw("far");
        let forever = CacheEntry::new(
            far.clone(),
            crate::state::StateDelta::new(),
            cache.clock.now() + Duration::from_secs(1 << 60),
        );
        cache.put(&far, &forever).await.unwrap();
        assert_eq!(cache.get(&far).await.unwrap(), Some(forever));
        assert_eq!(cache.invalidate_all().await.unwrap(), 2);
    }

    #[tokio::test]
    async fn an_unreachable_server_gives_a_cache_that_misses_within_the_timeout() {
        // Port 1 on loopback: nothing listens there, so the refusal is fast.
        let started = tokio::time::Instant::now();
        let cache = RedisNodeCache::builder("redis://127.0.0.1:1", "p")
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("best effort from the start");
        assert!(started.elapsed() < Duration::from_secs(2));
        let key = CacheKey::from_raw("k");
        let err = cache.get(&key).await.unwrap_err();
        assert!(
            matches!(&err, NodeCacheError::Unavailable { message, .. } if message.contains("not connected yet")),
            "{err}"
        );
    }
}
