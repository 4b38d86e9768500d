//! The Aegis: one node's whole fault-tolerance policy, and its parts.

mod aegis;
pub(crate) mod backoff;
mod budget;
mod money;
mod validate;

pub use aegis::{
    Aegis, CacheKeySpec, CachePolicy, CacheScope, DEFAULT_MAX_RETRY_AFTER, ErrorHandlerSpec,
    RetryPolicy, RetryPredicate, TimeoutPolicy,
};
pub use budget::{Remaining, Skip, SkipReason, SkippedStep, Spend, SpendBudget};
pub use money::{Money, Price, PriceError, PriceTable};
pub(crate) use validate::{retry_problems, timeout_problems};
