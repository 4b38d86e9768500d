//! The policy types an `Aegis` is made of: retry, timeout, error handler and
//! cache.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::error::Transience;
use crate::id::NodeId;
use crate::state::{FieldName, StateDelta};

/// The whole fault-tolerance policy for one node.
///
/// Every field is independently optional; `Aegis::default()` is no policy at
/// all: one attempt, no bound, no handler, no cache. An Aegis attaches beside
/// a node with `WarGraph::set_aegis`, or graph-wide with
/// `WarGraph::with_default_aegis`; a node's own entry wins wholesale.
///
/// Build one from [`Aegis::new`] (or `default()`) and its `with_*`
/// builders, each taking the policy or an `Option` of it (`None` unsets
/// it); the fields stay public to read. The type is `#[non_exhaustive]`: a
/// policy kind added later is not a breaking change.
///
/// ```
/// use aegis_runtime::policy::{Aegis, RetryPolicy, TimeoutPolicy};
/// use std::time::Duration;
///
/// let aegis = Aegis::new()
///     .with_retry(RetryPolicy::default().with_max_attempts(5))
///     .with_timeout(TimeoutPolicy::run(Duration::from_secs(30)));
/// assert_eq!(aegis.retry.as_ref().map(|r| r.max_attempts), Some(5));
/// assert!(aegis.on_error.is_none() && aegis.cache.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Aegis {
    /// Retry failed attempts inside the superstep.
    pub retry: Option<RetryPolicy>,
    /// Bound each attempt by a wall clock and/or an idle window.
    pub timeout: Option<TimeoutPolicy>,
    /// What to do on the node's final failure.
    pub on_error: Option<ErrorHandlerSpec>,
    /// Serve the node's result from the engine's cache.
    pub cache: Option<CachePolicy>,
    /// Cap one activation's spend (all its attempts together) in tokens and
    /// money, under the run's budget. Absent from policies serialised
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_cap: Option<super::SpendBudget>,
}

impl Aegis {
    /// No policy at all (the same as `Aegis::default()`): one attempt, no
    /// bound, no handler, no cache.
    pub const fn new() -> Self {
        Aegis {
            retry: None,
            timeout: None,
            on_error: None,
            cache: None,
            spend_cap: None,
        }
    }

    /// Retries failed attempts under `retry`.
    #[must_use]
    pub fn with_retry(mut self, retry: impl Into<Option<RetryPolicy>>) -> Self {
        self.retry = retry.into();
        self
    }

    /// Bounds each attempt by `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: impl Into<Option<TimeoutPolicy>>) -> Self {
        self.timeout = timeout.into();
        self
    }

    /// Handles the node's final failure with `on_error`.
    #[must_use]
    pub fn with_on_error(mut self, on_error: impl Into<Option<ErrorHandlerSpec>>) -> Self {
        self.on_error = on_error.into();
        self
    }

    /// Serves the node's result from the engine's cache under `cache`.
    #[must_use]
    pub fn with_cache(mut self, cache: impl Into<Option<CachePolicy>>) -> Self {
        self.cache = cache.into();
        self
    }

    /// Caps one activation's spend at `cap` (its own attempts; the run's
    /// budget still applies): a retry or a hop whose expected spend would
    /// pass what is left of either is skipped.
    #[must_use]
    pub fn with_spend_cap(mut self, cap: impl Into<Option<super::SpendBudget>>) -> Self {
        self.spend_cap = cap.into();
        self
    }

    /// Whether this Aegis sets nothing.
    pub fn is_empty(&self) -> bool {
        self.retry.is_none()
            && self.timeout.is_none()
            && self.on_error.is_none()
            && self.cache.is_none()
            && self.spend_cap.is_none()
    }
}

/// Which failures a [`RetryPolicy`] retries, by their [`Transience`].
///
/// `#[non_exhaustive]`: a predicate added later is not a breaking change, so
/// a `match` outside this crate needs a `_` arm.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RetryPredicate {
    /// Retry `Transient` failures only; `Permanent` and `Unknown` get one
    /// attempt. The default: an unclassified error is not assumed safe to
    /// repeat.
    #[default]
    TransientOnly,
    /// Retry `Transient` and `Unknown` failures; only `Permanent` ones stop.
    /// For nodes whose errors are mostly untyped but idempotent.
    TransientOrUnknown,
    /// Retry every failure, `Permanent` included (still bounded by
    /// `max_attempts`; a run-budget timeout is never retried).
    Always,
    /// Never retry: the policy only documents `max_attempts`, which stays 1
    /// in effect. Useful to switch retries off without removing a policy.
    Never,
    /// Ask the `RetryPredicateEvaluator` registered on the engine under this
    /// name (`WarEngine::with_retry_predicate`); unregistered names fail
    /// `start`/`resume` with `UnregisteredRetryPredicate`.
    Custom(String),
}

impl RetryPredicate {
    /// The built-in decision for a transience; `None` for `Custom`, which
    /// only the engine's registry can answer.
    pub fn allows_builtin(&self, transience: Transience) -> Option<bool> {
        Some(match self {
            RetryPredicate::TransientOnly => transience == Transience::Transient,
            RetryPredicate::TransientOrUnknown => transience != Transience::Permanent,
            RetryPredicate::Always => true,
            RetryPredicate::Never => false,
            RetryPredicate::Custom(_) => return None,
        })
    }
}

/// Retry a failed attempt inside the same superstep.
///
/// The wait before attempt `n` (n ≥ 2) is
/// `min(initial_interval × backoff_factor^(n−2), max_interval)`, plus, with
/// `jitter`, a uniform draw from `[0, that delay)`.
///
/// Validation (`RetryPolicyInvalid`) rejects `max_attempts: 0` (never
/// "unlimited"), a `backoff_factor` that is NaN, infinite or below 1.0, and an
/// `initial_interval` above `max_interval`. A zero `initial_interval` is valid
/// and means immediate retries (the timer is not touched at all).
///
/// Waits are slept on tokio's timer, which rounds a deadline up to its 1 ms
/// tick: a jittered 180.4 ms wait takes 181 ms.
///
/// **Retry-After floor (opt-in).** With `respect_retry_after`, a failure
/// that carries the provider's typed hint ([`NodeError::retry_after`](crate::error::NodeError::retry_after):
/// a 429's `Retry-After`) waits `max(backoff, min(hint, max_retry_after))`:
/// the hint is a floor under the backoff, the cap bounds only the hint (a
/// backoff longer than the cap is never shortened). Off by default, so the
/// guide's exact backoff stays the default. Validation rejects a zero
/// `max_retry_after` with the floor on.
///
/// **Budget.** A retry whose wait would end at or after the run budget
/// (`EngineLimits::run_timeout`) or an enclosing deadline (a Battalion
/// child's parent attempt) is not scheduled: the node fails at once with its
/// last error, its `on_error` handler runs, and
/// [`TraceEvent::RetrySkipped`](crate::trace::TraceEvent::RetrySkipped) and the
/// record's `retry_skipped` say why.
///
/// `retry` is not part of the graph fingerprint, so neither are the two
/// floor fields; they are serialized only when set away from their defaults.
///
/// Build one from `RetryPolicy::default()` and a `with_*` builder per field
/// (the type is `#[non_exhaustive]`, so a field added later breaks no one):
///
/// ```
/// use aegis_runtime::policy::{RetryPolicy, RetryPredicate};
/// use std::time::Duration;
///
/// let retry = RetryPolicy::default()
///     .with_max_attempts(5)
///     .with_initial_interval(Duration::from_millis(100))
///     .with_jitter(false)
///     .with_retry_on(RetryPredicate::TransientOrUnknown);
/// assert_eq!(retry.max_attempts, 5);
/// assert_eq!(retry.max_interval, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts, including the first: 3 means the node runs at most 3 times.
    pub max_attempts: u32,
    /// The wait before attempt 2.
    pub initial_interval: Duration,
    /// Each further wait is this many times the previous one.
    pub backoff_factor: f64,
    /// Every computed wait is capped here (before jitter).
    pub max_interval: Duration,
    /// Add a uniform random `[0, delay)` to each wait.
    pub jitter: bool,
    /// Which failures are retried.
    pub retry_on: RetryPredicate,
    /// Wait at least the provider's typed `Retry-After` hint (capped at
    /// `max_retry_after`) before the next attempt. Off by default.
    #[serde(default, skip_serializing_if = "is_false")]
    pub respect_retry_after: bool,
    /// The longest hint `respect_retry_after` honours: a longer one (say a
    /// hostile `retry-after: 86400`) waits this long. Defaults to
    /// [`DEFAULT_MAX_RETRY_AFTER`] (60 s, the default `max_interval`).
    #[serde(
        default = "default_max_retry_after",
        skip_serializing_if = "is_default_max_retry_after"
    )]
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// Runs the node at most `max_attempts` times, the first included
    /// (validation rejects 0).
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Waits `initial_interval` before attempt 2 (zero: retry at once).
    #[must_use]
    pub fn with_initial_interval(mut self, initial_interval: Duration) -> Self {
        self.initial_interval = initial_interval;
        self
    }

    /// Multiplies each further wait by `backoff_factor` (at least 1.0).
    #[must_use]
    pub fn with_backoff_factor(mut self, backoff_factor: f64) -> Self {
        self.backoff_factor = backoff_factor;
        self
    }

    /// Caps every computed wait at `max_interval` (before jitter).
    #[must_use]
    pub fn with_max_interval(mut self, max_interval: Duration) -> Self {
        self.max_interval = max_interval;
        self
    }

    /// Adds a uniform random `[0, delay)` to each wait (`true`, the
    /// default), or not.
    #[must_use]
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Retries the failures `retry_on` allows.
    #[must_use]
    pub fn with_retry_on(mut self, retry_on: RetryPredicate) -> Self {
        self.retry_on = retry_on;
        self
    }

    /// Waits at least the provider's typed `Retry-After` hint (`true`), or
    /// not (`false`, the default).
    #[must_use]
    pub fn with_respect_retry_after(mut self, respect_retry_after: bool) -> Self {
        self.respect_retry_after = respect_retry_after;
        self
    }

    /// Honours `Retry-After` hints up to `max_retry_after` (with
    /// `respect_retry_after` on).
    #[must_use]
    pub fn with_max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }
}

/// The default [`RetryPolicy::max_retry_after`]: 60 s, the same ceiling as
/// the default `max_interval`.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_max_retry_after() -> Duration {
    DEFAULT_MAX_RETRY_AFTER
}

fn is_default_max_retry_after(d: &Duration) -> bool {
    *d == DEFAULT_MAX_RETRY_AFTER
}

impl Default for RetryPolicy {
    /// 3 attempts; 500 ms, 1 s, 2 s, ... capped at 60 s; jitter on;
    /// transient failures only; no Retry-After floor.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval: Duration::from_millis(500),
            backoff_factor: 2.0,
            max_interval: Duration::from_secs(60),
            jitter: true,
            retry_on: RetryPredicate::TransientOnly,
            respect_retry_after: false,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

/// Bounds on each attempt. The limits are independent; a zero duration is
/// rejected by validation (`TimeoutPolicyInvalid`), and so is a
/// `first_chunk` not shorter than the `run_timeout` (the wall clock
/// would always cut first, so no provider would ever be hopped).
///
/// **Two stream deadlines.** For a streamed LLM completion (a Paladin node
/// over `PaladinExecutionService`) the time to the *first* chunk and the
/// silence *between* chunks are bounded apart:
///
/// * before the first chunk, `first_chunk` bounds each provider: a
///   provider silent that long fails with a transient `LlmError::Timeout`,
///   so a `FallbackLlmAdapter` hops to its next provider (and a single
///   provider's attempt fails transiently, for the retry policy). While a
///   completion waits for its first chunk the idle window is held, so the
///   hops of a chain are not cut by `idle_timeout`;
/// * once a chunk was delivered, a stall is `idle_timeout`: the attempt is
///   cut as `TimeoutKind::Idle`, with no hop — a partial answer is never
///   completed by another model.
///
/// A provider's own deadline set on the chain
/// (`FallbackLlmAdapter::with_provider_stream_deadlines`) wins over the
/// node's for that provider.
///
/// Build one from [`TimeoutPolicy::run`] or [`TimeoutPolicy::idle`] and the
/// `with_*` builders (the type is `#[non_exhaustive]`: a third limit was
/// already added once):
///
/// ```
/// use aegis_runtime::policy::TimeoutPolicy;
/// use std::time::Duration;
///
/// let timeout = TimeoutPolicy::run(Duration::from_secs(120))
///     .with_idle_timeout(Duration::from_secs(10))
///     .with_first_chunk(Duration::from_secs(5));
/// assert_eq!(timeout.idle_timeout, Some(Duration::from_secs(10)));
/// assert_eq!(TimeoutPolicy::idle(Duration::from_secs(3)).run_timeout, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TimeoutPolicy {
    /// No single attempt may run longer than this, progress or not.
    pub run_timeout: Option<Duration>,
    /// An attempt that reports no progress (heartbeat) for this long is cut.
    pub idle_timeout: Option<Duration>,
    /// Each streamed completion's first chunk must arrive within this, per
    /// provider; a provider that misses it is a transient failure the
    /// fallback chain hops past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk: Option<Duration>,
}

impl TimeoutPolicy {
    /// Bounds each attempt's wall clock at `run_timeout`, and nothing else.
    pub fn run(run_timeout: Duration) -> Self {
        TimeoutPolicy::default().with_run_timeout(run_timeout)
    }

    /// Cuts an attempt silent (no heartbeat) for `idle_timeout`, and
    /// nothing else.
    pub fn idle(idle_timeout: Duration) -> Self {
        TimeoutPolicy::default().with_idle_timeout(idle_timeout)
    }

    /// Bounds each attempt's wall clock at `run_timeout`.
    #[must_use]
    pub fn with_run_timeout(mut self, run_timeout: impl Into<Option<Duration>>) -> Self {
        self.run_timeout = run_timeout.into();
        self
    }

    /// Cuts an attempt that reports no progress for `idle_timeout`.
    #[must_use]
    pub fn with_idle_timeout(mut self, idle_timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = idle_timeout.into();
        self
    }

    /// Bounds each provider's wait for a streamed completion's first chunk
    /// at `first_chunk` (shorter than the run timeout).
    #[must_use]
    pub fn with_first_chunk(mut self, first_chunk: impl Into<Option<Duration>>) -> Self {
        self.first_chunk = first_chunk.into();
        self
    }
}

/// What happens on a node's final failure.
///
/// `#[non_exhaustive]`: a handler shape added later is not a breaking change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorHandlerSpec {
    /// Write the structured `NodeError` into `error_field` and run `to` next,
    /// instead of the failed node's static successors.
    Route {
        /// The compensating node.
        to: NodeId,
        /// Where the error goes (declared, any dispatch but `Sum`).
        error_field: FieldName,
    },
    /// Merge this delta instead and carry on down the static edges.
    Absorb {
        /// The delta merged in place of the node's.
        fallback_delta: StateDelta,
    },
    /// Hand the error to the `ErrorHandler` registered under this name.
    Custom(String),
}

impl ErrorHandlerSpec {
    /// The shape's name: `"route"`, `"absorb"` or `"custom"`.
    pub fn kind(&self) -> &'static str {
        match self {
            ErrorHandlerSpec::Route { .. } => "route",
            ErrorHandlerSpec::Absorb { .. } => "absorb",
            ErrorHandlerSpec::Custom(_) => "custom",
        }
    }
}

/// Serve a node's result from the engine's node cache.
///
/// **Fallback results are not cached by default.** A Paladin node's key
/// names its own model (the Paladin's configuration); an answer that a
/// fallback chain's later provider served — a lesser or different model —
/// is not what that key promises, and caching it would keep serving it for
/// the whole TTL after the primary recovered. Such a result is still the
/// node's result for this run; it is only not stored. Set
/// `cache_fallback_results` to store it anyway (any answer beats none, and
/// the entry's [`CacheOrigin`](crate::trace::CacheOrigin) still says who served
/// it).
///
/// Build one with [`CachePolicy::new`] and the `with_*` builders (the type
/// is `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CachePolicy {
    /// A hard expiry: an entry read at exactly its expiry instant is a miss.
    pub ttl: Duration,
    /// What the key is made of.
    pub key: CacheKeySpec,
    /// Also store a result served by a fallback provider (not the chain's
    /// first), under the node's key. Off by default. Part of the graph
    /// fingerprint only when on.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cache_fallback_results: bool,
    /// Which edits the node's entries survive: [`CacheScope::Graph`] (the
    /// default, the guide's key) or [`CacheScope::Node`]. Part of the graph
    /// fingerprint only when `Node`.
    #[serde(default, skip_serializing_if = "CacheScope::is_graph")]
    pub scope: CacheScope,
}

impl CachePolicy {
    /// A policy of `ttl` over `key`, graph-scoped, fallback results not
    /// cached.
    pub fn new(ttl: Duration, key: CacheKeySpec) -> Self {
        CachePolicy {
            ttl,
            key,
            cache_fallback_results: false,
            scope: CacheScope::Graph,
        }
    }

    /// Expires entries `ttl` after they are written.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Makes the key's input part `key`.
    #[must_use]
    pub fn with_key(mut self, key: CacheKeySpec) -> Self {
        self.key = key;
        self
    }

    /// Stores results served by a fallback provider too (`true`), or not.
    pub fn with_cache_fallback_results(mut self, on: bool) -> Self {
        self.cache_fallback_results = on;
        self
    }

    /// Keys the node's entries in `scope` (`cache(scope = node)` in the
    /// DSL).
    ///
    /// ```
    /// use aegis_runtime::policy::{CacheKeySpec, CachePolicy, CacheScope};
    /// use std::time::Duration;
    ///
    /// let policy = CachePolicy::new(Duration::from_secs(900), CacheKeySpec::Default)
    ///     .with_scope(CacheScope::Node);
    /// assert_eq!(policy.scope, CacheScope::Node);
    /// assert_eq!(CachePolicy::new(Duration::from_secs(1), CacheKeySpec::Default).scope, CacheScope::Graph);
    /// ```
    pub fn with_scope(mut self, scope: CacheScope) -> Self {
        self.scope = scope;
        self
    }
}

/// What a node's cache entries belong to, and so which edits they survive.
///
/// Whatever the scope, a key covers the node id, the node's own code (the
/// digest `#[aegis]` computes from the function's tokens, or the version a
/// builder node gives: [`StateNode::code_version`](crate::graph::StateNode::code_version)),
/// its input (a Paladin node's rendered prompt and configuration; a
/// Function node's snapshot or named fields), the mustered task and the
/// engine's cache namespace (`WarEngine::with_cache_namespace`). So a node
/// whose code, prompt, model or input changed never hits an old entry, in
/// either scope. The scopes differ in what else the key covers:
///
/// - [`CacheScope::Graph`] (the default, as the guide has it): the whole
///   graph fingerprint. Change the graph's shape anywhere — a node, an
///   edge, a field, another node's `on_error` — and every entry of the
///   graph is left behind: a deploy starts cold.
/// - [`CacheScope::Node`]: the node's own shape instead — its id and kind,
///   its code, and for a Paladin node its configuration, input template,
///   output field and output schema — and nothing else of the graph. Its
///   entries survive unrelated edits (another node added or changed, an
///   unused field, an edge elsewhere), and any graph holding the same node
///   over the same cache and namespace shares them (what the node reads is
///   still its input: a Function node keyed on its whole snapshot misses
///   when a new field with a default, or a node that runs before it,
///   changes that snapshot; key it on `CacheKeySpec::Fields` to narrow
///   it). A Function node needs
///   a code version for it (an `#[aegis]` function always has one):
///   validation refuses a node-scoped Function node without one
///   (`CacheScopeWithoutCodeVersion`), whose key would hold none of its
///   code. A stored delta is still checked against the running graph's
///   schema on every hit (an undeclared or `Deny` field is a miss).
///
/// A hit reports the scope that served it
/// ([`CacheOrigin::scope`](crate::trace::CacheOrigin::scope)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheScope {
    /// Keys cover the whole graph fingerprint (the default).
    #[default]
    Graph,
    /// Keys cover the node's own shape, not the rest of the graph.
    Node,
}

impl CacheScope {
    /// Whether this is [`CacheScope::Graph`], the default.
    pub fn is_graph(&self) -> bool {
        matches!(self, CacheScope::Graph)
    }

    /// `"graph"` or `"node"`, as the DSL writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            CacheScope::Graph => "graph",
            CacheScope::Node => "node",
        }
    }
}

impl std::fmt::Display for CacheScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The input part of a node cache key.
///
/// `#[non_exhaustive]`: a key shape added later is not a breaking change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CacheKeySpec {
    /// The graph fingerprint, the node id, the node's input (a Paladin node's
    /// rendered input; a Function node's whole snapshot) and the Paladin's
    /// configuration.
    #[default]
    Default,
    /// As `Default`, plus (for a Paladin node) or instead of the snapshot (for
    /// a Function node) the named fields' values.
    Fields(Vec<FieldName>),
}
