//! The Aegis: one node's whole fault-tolerance policy, and its parts.

pub(crate) mod backoff;
mod policy;
mod validate;

pub use policy::{
    Aegis, CacheKeySpec, CachePolicy, CacheScope, DEFAULT_MAX_RETRY_AFTER, ErrorHandlerSpec,
    RetryPolicy, RetryPredicate, TimeoutPolicy,
};
pub(crate) use validate::{retry_problems, timeout_problems};
