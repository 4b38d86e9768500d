//! The Aegis: one node's whole fault-tolerance policy, and its parts.

mod aegis;
pub(crate) mod backoff;
pub(crate) mod hop;
mod validate;

pub use crate::spend::{
    Money, Price, PriceError, PriceTable, Remaining, Skip, SkipReason, SkippedStep, Spend,
    SpendBudget,
};
pub use aegis::{
    Aegis, CacheKeySpec, CachePolicy, CacheScope, DEFAULT_MAX_RETRY_AFTER, ErrorHandlerSpec,
    RetryPolicy, RetryPredicate, TimeoutPolicy,
};
pub(crate) use validate::{retry_problems, timeout_problems};
