//! [`IntoShared`]: the one convention every constructor and builder that
//! keeps a store, a cache, a queue, an LLM, a port or a hook follows — give
//! it the value, or an `Arc` of it when you keep a handle of your own.

use std::sync::Arc;

/// A value, or an [`Arc`] of it, that a constructor or builder keeps as an
/// `Arc<T>`.
///
/// Every Aegis constructor and builder that keeps a store, a cache, a run
/// queue, an LLM, a Paladin port or a hook takes `impl IntoShared<..>`:
///
/// - pass the value itself when the engine (or pool, client, service) is its
///   only user — `WarEngine::new(InMemoryWaypointStore::new())`,
///   `.with_llm(MockLlmAdapter::new())`;
/// - pass an `Arc` (of the concrete type, or the `Arc<dyn Trait>` you
///   already hold) to keep a handle of your own — to read a store's history
///   beside the engine, share one cache between engines, or script a mock
///   LLM after handing it over. No clone of the value is made either way.
///
/// ```
/// use aegis_runtime::cache::InMemoryNodeCache;
/// use aegis_runtime::engine::WarEngine;
/// use aegis_runtime::waypoint::InMemoryWaypointStore;
/// use std::sync::Arc;
///
/// // By value: the engine owns its store.
/// let engine = WarEngine::new(InMemoryWaypointStore::new());
///
/// // By Arc: the caller keeps reading the same store.
/// let store = Arc::new(InMemoryWaypointStore::new());
/// let shared = WarEngine::new(store.clone()).with_node_cache(InMemoryNodeCache::new());
/// assert!(Arc::ptr_eq(shared.store(), &store));
/// # let _ = engine;
/// ```
///
/// It is implemented for every type implementing one of the traits above
/// (and for `Arc`s of them); it needs no implementation of its own.
pub trait IntoShared<T: ?Sized> {
    /// The shared handle: the `Arc` itself, or the value moved into a new
    /// one.
    fn into_shared(self) -> Arc<T>;
}

/// `IntoShared<dyn Trait>` for a value of the trait, an `Arc` of one, and an
/// `Arc<dyn Trait>`: each trait's own module invokes it beside the trait,
/// so this leaf imports none of them.
macro_rules! into_shared_dyn {
    ($($trait:path),* $(,)?) => {$(
        impl<T: $trait> $crate::share::IntoShared<dyn $trait> for T {
            fn into_shared(self) -> ::std::sync::Arc<dyn $trait> {
                ::std::sync::Arc::new(self)
            }
        }

        impl<T: $trait> $crate::share::IntoShared<dyn $trait> for ::std::sync::Arc<T> {
            fn into_shared(self) -> ::std::sync::Arc<dyn $trait> {
                self
            }
        }

        impl $crate::share::IntoShared<dyn $trait> for ::std::sync::Arc<dyn $trait> {
            fn into_shared(self) -> ::std::sync::Arc<dyn $trait> {
                self
            }
        }
    )*};
}
pub(crate) use into_shared_dyn;
