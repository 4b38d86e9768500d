//! What a run spends in tokens and money, what it may spend, and why a
//! retry or a hop was not sent: plain values, below every folder that
//! records or reports them (an `EngineError` carries them). Public through
//! [`crate::policy`].

mod budget;
mod money;

pub use budget::{Remaining, Skip, SkipReason, SkippedStep, Spend, SpendBudget};
pub use money::{Money, Price, PriceError, PriceTable};
