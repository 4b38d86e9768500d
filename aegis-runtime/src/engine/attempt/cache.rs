//! The cache rule: consulted once, before attempt 1 and outside the
//! interceptor chain; only the node's own success is stored.

use std::sync::Arc;

use super::activation::{ActivationCtx, ActivationResult};
use super::record::Recorder;
use crate::cache::{CacheEntry, CacheKey, CacheLookup, KeySeed, derive_key_seeded};
use crate::engine::kit::Kit;
use crate::graph::Directive;
use crate::id::NodeId;
use crate::state::Battlefield;
use crate::trace::{AttemptStatus, CacheOrigin, TraceEvent};
use crate::waypoint::NodeStatus;

impl Kit {
    /// The node's cache key, when it has a cache policy and the engine a
    /// backend. A key that cannot be derived (an input that does not render)
    /// is a miss that is never stored.
    pub(super) fn cache_key(
        &self,
        act: &ActivationCtx<'_>,
        state: &Battlefield,
        node_id: &NodeId,
    ) -> Option<CacheKey> {
        let policy = act.aegis.cache.as_ref()?;
        self.node_cache.as_ref()?;
        let task = act.task.map(|t| (t.task_key.as_str(), &t.payload));
        let namespace = self.cache_namespace.as_deref();
        let derived = match act.cache_seed {
            Some(seed) => derive_key_seeded(seed, act.spec, &policy.key, state, task, namespace),
            // Only for a run carrying another fingerprint than its graph's
            // (the index's graph-scoped seeds are made from the graph's).
            None => {
                let seed = KeySeed::new(policy.scope, act.fingerprint, node_id, act.spec);
                derive_key_seeded(&seed, act.spec, &policy.key, state, task, namespace)
            }
        };
        match derived {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(node_id = %node_id, error = %e, "no cache key; running uncached");
                None
            }
        }
    }

    /// What the cache holds under `key`, when the backend answers at once
    /// (an in-process one): no future is built for such a lookup. `None`
    /// when the backend must be awaited ([`Self::cache_lookup`]).
    pub(super) fn cache_lookup_now(
        &self,
        act: &ActivationCtx<'_>,
        key: &CacheKey,
        rec: &Recorder<'_>,
    ) -> Option<CacheLookup> {
        match &self.node_cache {
            Some(cache) => cache.lookup_now(act.schema, key, rec.started()),
            None => Some(CacheLookup::Miss),
        }
    }

    /// What the cache holds under `key`, waiting for the backend.
    pub(super) async fn cache_lookup(
        &self,
        act: &ActivationCtx<'_>,
        key: &CacheKey,
        rec: &Recorder<'_>,
    ) -> CacheLookup {
        match &self.node_cache {
            Some(cache) => cache.lookup_at(act.schema, key, rec.started()).await,
            None => CacheLookup::Miss,
        }
    }

    /// The activation `entry` serves: its delta along the edges, recorded
    /// as a hit.
    pub(super) fn served(
        &self,
        act: &ActivationCtx<'_>,
        entry: Arc<CacheEntry>,
        node_id: &NodeId,
        rec: &mut Recorder<'_>,
    ) -> ActivationResult {
        // A backend holding decoded entries shares its copy: take only the
        // delta and the origin from it; an entry of our own is moved.
        let (delta, origin) = match Arc::try_unwrap(entry) {
            Ok(own) => (own.delta, own.origin),
            Err(shared) => (shared.delta.clone(), shared.origin.clone()),
        };
        if let Some(origin) = &origin {
            tracing::debug!(node_id = %node_id, origin = %origin, "served from the node cache");
        }
        let span = tracing::Span::current();
        if !span.is_disabled() {
            span.record("cache_hit", true);
            if let Some(origin) = &origin {
                span.record("cache_origin", tracing::field::display(origin));
            }
        }
        self.emit_with(tracing::Level::DEBUG, || TraceEvent::NodeFinished {
            thread_id: act.thread_id.to_string(),
            superstep: act.superstep,
            node_id: node_id.clone(),
            task_key: act.task.map(|t| t.task_key.clone()),
            attempt: 1,
            status: AttemptStatus::Succeeded,
            cache_hit: true,
            cache_origin: origin.as_deref().cloned().map(Box::new),
            duration: rec.elapsed(),
        });
        let mut record = rec.finish(NodeStatus::Succeeded, 1);
        record.cache_hit = true;
        record.cache_origin = origin;
        ActivationResult::Done {
            directive: Directive::edges(delta),
            record,
            handled: None,
        }
    }

    /// Stores a success under `key` for the policy's TTL, recording who
    /// produced it. The handle refuses any directive but an Edges-routed
    /// one; a fallback provider's answer is stored only when the policy
    /// says `cache_fallback_results` (the key promises the primary's model).
    pub(super) async fn cache_store(
        &self,
        act: &ActivationCtx<'_>,
        key: Option<&CacheKey>,
        directive: &Directive,
        origin: CacheOrigin,
    ) {
        if let (Some(key), Some(cache), Some(policy)) =
            (key, &self.node_cache, act.aegis.cache.as_ref())
        {
            if origin.fallback && !policy.cache_fallback_results {
                tracing::debug!(
                    node_id = %origin.node_id,
                    served_by = origin.served_by.as_deref().unwrap_or("?"),
                    "a fallback provider served this result; not cached (CachePolicy::cache_fallback_results is off)"
                );
                return;
            }
            cache
                .store_from(act.schema, key, directive, policy.ttl, Some(origin))
                .await;
        }
    }
}
