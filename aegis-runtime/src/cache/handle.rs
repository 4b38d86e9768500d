//! `NodeCacheHandle`: the cache semantics the engine applies around a
//! backend — best effort, re-checked expiry, Deny fields, Edges only.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::validate::delta_is_cacheable;
use super::validate::{EntryMisfit, delta_fits};
use super::{CacheClock, CacheEntry, CacheKey, InMemoryNodeCache, NodeCache, NodeCacheError};
use crate::graph::{Directive, NextStep};
use crate::state::BattlefieldSchema;
use crate::trace::CacheOrigin;

/// What a lookup found.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CacheLookup {
    /// A fresh entry: merge its delta, run nothing. Shared with the
    /// backend when it holds decoded entries (no copy per hit).
    Hit(Arc<CacheEntry>),
    /// Nothing stored under the key.
    Miss,
    /// The backend served an entry this handle's clock says has expired.
    Expired {
        /// The entry's expiry.
        expires_at: SystemTime,
    },
    /// The backend served an entry that cannot be this lookup's result (it
    /// records another key, or does not fit the schema); treated as a miss,
    /// and overwritten when the node's fresh result is stored.
    Misfit(EntryMisfit),
    /// The backend failed; treated as a miss.
    Failed(NodeCacheError),
}

impl CacheLookup {
    /// The entry, on a hit.
    pub fn into_hit(self) -> Option<Arc<CacheEntry>> {
        match self {
            CacheLookup::Hit(entry) => Some(entry),
            _ => None,
        }
    }

    /// Whether this is a hit.
    pub fn is_hit(&self) -> bool {
        matches!(self, CacheLookup::Hit(_))
    }
}

/// What a store did.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoreOutcome {
    /// Stored, served until `expires_at`.
    Stored {
        /// The entry's expiry.
        expires_at: SystemTime,
    },
    /// Not stored: the directive does not follow the edges, and replaying
    /// only its delta would drop its routing.
    NotEdgesRouted,
    /// Not stored: the delta writes a field marked `CacheMarker::Deny`.
    DeniedField,
    /// Not stored: a zero TTL, or one so long the expiry is unrepresentable.
    TtlOutOfRange,
    /// The backend failed; logged, and the run goes on.
    Failed(NodeCacheError),
}

/// A node cache backend with the engine's rules around it.
///
/// Cheap to clone. The handle adopts its backend's clock when the backend
/// has one, so both judge every expiry boundary alike.
#[doc(hidden)]
#[derive(Clone)]
pub struct NodeCacheHandle {
    backend: Arc<dyn NodeCache>,
    /// `backend` again when it is the in-memory cache, recognised once
    /// here: its lookups are answered in place, without a future, and
    /// share the entry it holds instead of copying it.
    memory: Option<Arc<InMemoryNodeCache>>,
    clock: CacheClock,
}

impl NodeCacheHandle {
    /// Wraps `backend`.
    pub fn new(backend: Arc<dyn NodeCache>) -> Self {
        let clock = backend.clock().cloned().unwrap_or_default();
        let memory = InMemoryNodeCache::recognise(&backend);
        NodeCacheHandle {
            backend,
            memory,
            clock,
        }
    }

    /// Judges expiry by `clock` instead of the backend's.
    pub fn with_clock(mut self, clock: CacheClock) -> Self {
        self.clock = clock;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn NodeCache> {
        &self.backend
    }

    /// The clock expiry is judged by.
    pub fn clock(&self) -> &CacheClock {
        &self.clock
    }

    /// Looks `key` up for a node of a graph with `schema`. Only
    /// [`CacheLookup::Hit`] is a hit; everything else is a miss:
    ///
    /// - an entry recording another key than `key` (copied or planted
    ///   there), and one whose delta does not fit `schema` (an undeclared
    ///   field, a value its dispatch rule rejects, a `Deny` field) are
    ///   [`CacheLookup::Misfit`], logged at `warn`: serving it would fail
    ///   the run's merge, or serve another activation's result;
    /// - the entry is re-checked against this handle's clock whatever the
    ///   backend served (closed boundary);
    /// - a backend error is [`CacheLookup::Failed`], logged at `warn`.
    pub async fn lookup(&self, schema: &BattlefieldSchema, key: &CacheKey) -> CacheLookup {
        self.lookup_at(schema, key, tokio::time::Instant::now())
            .await
    }

    /// [`NodeCacheHandle::lookup`] at `at`, an instant the caller read just
    /// before (the activation's start): one clock read fewer per lookup.
    pub(crate) async fn lookup_at(
        &self,
        schema: &BattlefieldSchema,
        key: &CacheKey,
        at: tokio::time::Instant,
    ) -> CacheLookup {
        match self.lookup_now(schema, key, at) {
            Some(found) => found,
            None => {
                let found = self.backend.get(key).await.map(|e| e.map(Arc::new));
                // An entry awaited is judged when it arrives, not when it
                // was asked.
                self.judge(schema, key, found, self.clock.now())
            }
        }
    }

    /// [`NodeCacheHandle::lookup_at`] when the backend answers without
    /// waiting (the in-memory cache); `None` when it must be awaited. No
    /// future is built for a lookup that never waits.
    pub(crate) fn lookup_now(
        &self,
        schema: &BattlefieldSchema,
        key: &CacheKey,
        at: tokio::time::Instant,
    ) -> Option<CacheLookup> {
        let memory = self.memory.as_ref()?;
        let now = self.clock.at(at);
        let found = memory.lookup_at(key, now);
        Some(self.judge(schema, key, found, now))
    }

    /// What the backend's answer for `key`, judged at `now`, is.
    fn judge(
        &self,
        schema: &BattlefieldSchema,
        key: &CacheKey,
        found: Result<Option<Arc<CacheEntry>>, NodeCacheError>,
        now: SystemTime,
    ) -> CacheLookup {
        let backend = self.backend.backend_name();
        let entry = match found {
            Ok(None) => return CacheLookup::Miss,
            Ok(Some(entry)) => entry,
            Err(e) => {
                tracing::warn!(backend, key = %key, error = %e, "node cache lookup failed; treated as a miss");
                return CacheLookup::Failed(e);
            }
        };
        let misfit = if entry.key != *key {
            Some(EntryMisfit::OtherKey {
                stored_under: entry.key.clone(),
            })
        } else if !entry.is_fresh_at(now) {
            tracing::debug!(backend, key = %key, "node cache served an expired entry; treated as a miss");
            return CacheLookup::Expired {
                expires_at: entry.expires_at,
            };
        } else {
            delta_fits(schema, &entry.delta).err()
        };
        match misfit {
            None => CacheLookup::Hit(entry),
            Some(misfit) => {
                tracing::warn!(backend, key = %key, reason = %misfit, "node cache entry does not fit; treated as a miss and overwritten by the node's result");
                CacheLookup::Misfit(misfit)
            }
        }
    }

    /// Stores the directive of a successful attempt under `key` for `ttl`.
    ///
    /// Call it only with a node's own successful directive, never a
    /// handler's. It refuses, without touching the backend, a directive that
    /// does not follow the edges (`Goto`, `End`, ...) and a delta writing a
    /// field marked `CacheMarker::Deny`. A backend error is logged at `warn`
    /// and returned as [`StoreOutcome::Failed`]; it must not fail the run.
    pub async fn store(
        &self,
        schema: &BattlefieldSchema,
        key: &CacheKey,
        directive: &Directive,
        ttl: Duration,
    ) -> StoreOutcome {
        self.store_from(schema, key, directive, ttl, None).await
    }

    /// [`NodeCacheHandle::store`], the entry recording `origin` (who
    /// produced the directive), which every hit then reports.
    pub async fn store_from(
        &self,
        schema: &BattlefieldSchema,
        key: &CacheKey,
        directive: &Directive,
        ttl: Duration,
        origin: Option<CacheOrigin>,
    ) -> StoreOutcome {
        if !matches!(directive.next, NextStep::Edges) {
            return StoreOutcome::NotEdgesRouted;
        }
        if !delta_is_cacheable(schema, &directive.delta) {
            return StoreOutcome::DeniedField;
        }
        let Some(expires_at) = self.clock.now().checked_add(ttl).filter(|_| !ttl.is_zero()) else {
            return StoreOutcome::TtlOutOfRange;
        };
        let entry =
            CacheEntry::new(key.clone(), directive.delta.clone(), expires_at).with_origin(origin);
        match self.backend.put(key, &entry).await {
            Ok(()) => StoreOutcome::Stored { expires_at },
            Err(e) => {
                tracing::warn!(backend = self.backend.backend_name(), key = %key, error = %e, "node cache store failed; the run goes on");
                StoreOutcome::Failed(e)
            }
        }
    }
}

impl fmt::Debug for NodeCacheHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCacheHandle")
            .field("backend", &self.backend.backend_name())
            .field("clock", &self.clock)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::InMemoryNodeCache;
    use crate::state::{CacheMarker, DispatchRule, FieldName, FieldSpec, StateDelta};
    use async_trait::async_trait;
    use serde_json::json;

    fn schema() -> BattlefieldSchema {
        BattlefieldSchema::new(vec![
            FieldSpec::new(
                FieldName::new("answer").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
            FieldSpec::new(
                FieldName::new("audit_log").unwrap(),
                DispatchRule::Append,
                None,
                false,
            )
            .with_cache(CacheMarker::Deny),
        ])
    }

    fn answer(v: &str) -> Directive {
        let mut delta = StateDelta::new();
        delta.set("answer", v).unwrap();
        Directive::edges(delta)
    }

    fn key() -> CacheKey {
        CacheKey::from_raw("v1:g:n:d")
    }

    #[tokio::test(start_paused = true)]
    async fn a_stored_directive_is_a_hit_until_exactly_its_ttl() {
        let handle = NodeCacheHandle::new(Arc::new(InMemoryNodeCache::new()));
        let ttl = Duration::from_secs(900);
        let out = handle.store(&schema(), &key(), &answer("42"), ttl).await;
        assert_eq!(
            out,
            StoreOutcome::Stored {
                expires_at: handle.clock().now() + ttl
            }
        );
        tokio::time::advance(ttl - Duration::from_nanos(1)).await;
        let hit = handle.lookup(&schema(), &key()).await.into_hit().unwrap();
        assert_eq!(hit.delta.get("answer"), Some(&json!("42")));
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert_eq!(handle.lookup(&schema(), &key()).await, CacheLookup::Miss);
    }

    /// A backend that serves whatever it was given, expired or not.
    struct Lax(std::sync::Mutex<Option<CacheEntry>>);
    #[async_trait]
    impl NodeCache for Lax {
        async fn get(&self, _: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
            Ok(self.0.lock().unwrap().clone())
        }
        async fn put(&self, _: &CacheKey, e: &CacheEntry) -> Result<(), NodeCacheError> {
            *self.0.lock().unwrap() = Some(e.clone());
            Ok(())
        }
        async fn invalidate_prefix(&self, _: &str) -> Result<u64, NodeCacheError> {
            Ok(0)
        }
        async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
            Ok(0)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_is_rechecked_whatever_the_backend_serves() {
        let handle = NodeCacheHandle::new(Arc::new(Lax(Default::default())));
        let ttl = Duration::from_secs(10);
        handle.store(&schema(), &key(), &answer("a"), ttl).await;
        assert!(handle.lookup(&schema(), &key()).await.is_hit());
        tokio::time::advance(ttl).await;
        assert!(matches!(
            handle.lookup(&schema(), &key()).await,
            CacheLookup::Expired { .. }
        ));
    }

    struct Broken;
    #[async_trait]
    impl NodeCache for Broken {
        async fn get(&self, _: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
            Err(NodeCacheError::Unavailable {
                backend: "broken",
                message: "down".into(),
            })
        }
        async fn put(&self, _: &CacheKey, _: &CacheEntry) -> Result<(), NodeCacheError> {
            Err(NodeCacheError::Timeout {
                operation: "put",
                after: Duration::from_millis(5),
            })
        }
        async fn invalidate_prefix(&self, _: &str) -> Result<u64, NodeCacheError> {
            Ok(0)
        }
        async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
            Ok(0)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_in_memory_cache_is_answered_in_place_even_under_a_ceiling_and_others_awaited() {
        let memory = Arc::new(InMemoryNodeCache::new());
        let ceiling = Arc::new(crate::cache::TtlCeiling::new(
            memory.clone(),
            Duration::from_secs(30),
        ));
        let at = tokio::time::Instant::now();
        for backend in [memory.clone() as Arc<dyn NodeCache>, ceiling] {
            let handle = NodeCacheHandle::new(backend);
            assert!(Arc::ptr_eq(handle.memory.as_ref().unwrap(), &memory));
            assert_eq!(
                handle.lookup_now(&schema(), &key(), at),
                Some(CacheLookup::Miss)
            );
        }
        // Stored through the ceiling, capped by it, found in place.
        let handle = NodeCacheHandle::new(Arc::new(crate::cache::TtlCeiling::new(
            memory.clone(),
            Duration::from_secs(30),
        )));
        let ttl = Duration::from_secs(3600);
        let out = handle.store(&schema(), &key(), &answer("7"), ttl).await;
        assert!(matches!(out, StoreOutcome::Stored { .. }));
        let at = tokio::time::Instant::now();
        let hit = handle.lookup_now(&schema(), &key(), at).unwrap().into_hit();
        assert_eq!(
            hit.unwrap().expires_at,
            handle.clock().at(at) + Duration::from_secs(30)
        );

        // Any other backend is awaited through `get`.
        let other = NodeCacheHandle::new(Arc::new(Broken));
        assert!(other.memory.is_none());
        assert_eq!(other.lookup_now(&schema(), &key(), at), None);
    }

    #[tokio::test]
    async fn backend_errors_are_misses_and_logged_store_failures() {
        let handle = NodeCacheHandle::new(Arc::new(Broken));
        let lookup = handle.lookup(&schema(), &key()).await;
        assert!(matches!(lookup, CacheLookup::Failed(_)));
        assert_eq!(lookup.into_hit(), None);
        assert!(matches!(
            handle
                .store(&schema(), &key(), &answer("a"), Duration::from_secs(1))
                .await,
            StoreOutcome::Failed(NodeCacheError::Timeout { .. })
        ));
    }

    #[tokio::test]
    async fn only_edges_routed_cacheable_deltas_with_a_usable_ttl_are_stored() {
        let backend = Arc::new(InMemoryNodeCache::new());
        let handle = NodeCacheHandle::new(backend.clone());
        let ttl = Duration::from_secs(60);
        let s = schema();

        let mut delta = StateDelta::new();
        delta.set("answer", "x").unwrap();
        for directive in [
            Directive::goto(delta.clone(), "elsewhere"),
            Directive::end(delta.clone()),
        ] {
            assert_eq!(
                handle.store(&s, &key(), &directive, ttl).await,
                StoreOutcome::NotEdgesRouted
            );
        }

        let mut denied = StateDelta::new();
        denied
            .set("answer", "x")
            .unwrap()
            .set("audit_log", "hit")
            .unwrap();
        assert_eq!(
            handle
                .store(&s, &key(), &Directive::edges(denied), ttl)
                .await,
            StoreOutcome::DeniedField
        );

        assert_eq!(
            handle.store(&s, &key(), &answer("x"), Duration::ZERO).await,
            StoreOutcome::TtlOutOfRange
        );
        assert_eq!(
            handle.store(&s, &key(), &answer("x"), Duration::MAX).await,
            StoreOutcome::TtlOutOfRange
        );
        assert!(backend.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn one_graphs_entry_is_never_another_graphs_hit() {
        use crate::graph::Paladin;
        use crate::graph::{InputMapping, NodeSpec};
        use crate::id::NodeId;
        use crate::policy::CacheKeySpec;
        let spec = NodeSpec::paladin(
            Paladin::new("A").with_model("m"),
            InputMapping::new("Answer: {answer}"),
            FieldName::new("answer").unwrap(),
        );
        let state = crate::state::initial_state(&schema(), &json!({"answer": "q"})).unwrap();
        let key_in = |graph: &str| {
            crate::cache::key::derive_key(
                graph,
                &NodeId::new("answerer"),
                &spec,
                &CacheKeySpec::Default,
                &state,
                None,
            )
            .unwrap()
        };
        let handle = NodeCacheHandle::new(Arc::new(InMemoryNodeCache::new()));
        let stored = handle
            .store(
                &schema(),
                &key_in("v6:a"),
                &answer("a"),
                Duration::from_secs(60),
            )
            .await;
        assert!(matches!(stored, StoreOutcome::Stored { .. }));
        assert!(handle.lookup(&schema(), &key_in("v6:a")).await.is_hit());
        assert_eq!(
            handle.lookup(&schema(), &key_in("v6:b")).await,
            CacheLookup::Miss
        );
    }

    fn schema_with_counters() -> BattlefieldSchema {
        let f = |n: &str, rule| FieldSpec::new(FieldName::new(n).unwrap(), rule, None, false);
        BattlefieldSchema::new(vec![
            f("answer", DispatchRule::LastWrite),
            f("total", DispatchRule::Sum),
            f("meta", DispatchRule::Merge),
            f("log", DispatchRule::Append),
        ])
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_that_does_not_fit_the_schema_is_a_misfit_then_overwritten() {
        let backend = Arc::new(InMemoryNodeCache::new());
        let handle = NodeCacheHandle::new(backend.clone());
        let schema = schema_with_counters();
        let far = handle.clock().now() + Duration::from_secs(600);
        let misfits: Vec<(&str, serde_json::Value, EntryMisfit)> = vec![
            (
                "gone",
                json!(1),
                EntryMisfit::UndeclaredField {
                    field: FieldName::new("gone").unwrap(),
                },
            ),
            (
                "total",
                json!("12"),
                EntryMisfit::DispatchMismatch {
                    field: FieldName::new("total").unwrap(),
                    rule: DispatchRule::Sum,
                    found: "a string",
                },
            ),
            (
                "meta",
                json!([1]),
                EntryMisfit::DispatchMismatch {
                    field: FieldName::new("meta").unwrap(),
                    rule: DispatchRule::Merge,
                    found: "an array",
                },
            ),
        ];
        for (field, value, expected) in misfits {
            let mut delta = StateDelta::new();
            delta.set(field, value).unwrap();
            backend
                .put(&key(), &CacheEntry::new(key(), delta, far))
                .await
                .unwrap();
            assert_eq!(
                handle.lookup(&schema, &key()).await,
                CacheLookup::Misfit(expected)
            );
            // The node's fresh result replaces it.
            let out = handle
                .store(&schema, &key(), &answer("fresh"), Duration::from_secs(60))
                .await;
            assert!(matches!(out, StoreOutcome::Stored { .. }));
            let hit = handle.lookup(&schema, &key()).await.into_hit().unwrap();
            assert_eq!(hit.delta.get("answer"), Some(&json!("fresh")));
        }
        // An object appended to an Append field is what a node may write.
        let mut append = StateDelta::new();
        append.set("log", json!({"k": 1})).unwrap();
        backend
            .put(&key(), &CacheEntry::new(key(), append, far))
            .await
            .unwrap();
        assert!(handle.lookup(&schema, &key()).await.is_hit());
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_found_under_another_key_is_a_misfit() {
        let backend = Arc::new(InMemoryNodeCache::new());
        let handle = NodeCacheHandle::new(backend.clone());
        let elsewhere = CacheKey::from_raw("v1:g:n:other");
        let out = handle
            .store(&schema(), &elsewhere, &answer("a"), Duration::from_secs(60))
            .await;
        assert!(matches!(out, StoreOutcome::Stored { .. }));
        // Another process copies it, whole, under this key.
        let copied = backend.get(&elsewhere).await.unwrap().unwrap();
        backend.put(&key(), &copied).await.unwrap();
        assert_eq!(
            handle.lookup(&schema(), &key()).await,
            CacheLookup::Misfit(EntryMisfit::OtherKey {
                stored_under: elsewhere.clone()
            })
        );
        assert!(handle.lookup(&schema(), &elsewhere).await.is_hit());
    }

    #[test]
    fn the_handle_adopts_its_backends_clock() {
        let manual = super::super::ManualClock::new(SystemTime::UNIX_EPOCH);
        let backend = InMemoryNodeCache::new().with_clock(manual.clock());
        let handle = NodeCacheHandle::new(Arc::new(backend));
        manual.advance(Duration::from_secs(3));
        assert_eq!(
            handle.clock().now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(3)
        );
        assert!(format!("{handle:?}").contains("memory"));
    }
}
