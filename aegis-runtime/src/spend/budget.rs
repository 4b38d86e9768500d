//! Spend budgets: how many tokens and how much money a run (or one node)
//! may spend, what was spent, and why a retry or a provider hop was
//! skipped rather than sent.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::money::{Money, Price, PriceError};

/// Tokens and money spent: one attempt's, one activation's or one run's.
///
/// `estimated` is set when any part of it is an estimate rather than the
/// provider's own count: a stream cut before the provider reported usage,
/// or a provider that reports none (about four characters a token).
/// `cost` is zero for calls the price table does not price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spend {
    /// Input (prompt) tokens.
    pub prompt_tokens: u64,
    /// Output (completion) tokens.
    pub completion_tokens: u64,
    /// What they cost.
    pub cost: Money,
    /// Whether any part is an estimate, not the provider's count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Spend {
    /// `prompt_tokens` in and `completion_tokens` out, costing `cost`.
    pub fn new(prompt_tokens: u64, completion_tokens: u64, cost: Money) -> Self {
        Spend {
            prompt_tokens,
            completion_tokens,
            cost,
            estimated: false,
        }
    }

    /// Sets [`estimated`](Self::estimated).
    #[must_use]
    pub fn with_estimated(mut self, estimated: bool) -> Self {
        self.estimated = estimated;
        self
    }

    /// Both token counts together.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Whether nothing was spent.
    pub fn is_zero(&self) -> bool {
        self.total_tokens() == 0 && self.cost == Money::ZERO
    }

    /// The sum (saturating); estimated if either is.
    #[must_use]
    pub fn plus(&self, other: &Spend) -> Spend {
        Spend {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            cost: self.cost.saturating_add(other.cost),
            estimated: self.estimated || other.estimated,
        }
    }
}

impl fmt::Display for Spend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} tokens ({} in, {} out), {}",
            if self.estimated { "~" } else { "" },
            self.total_tokens(),
            self.prompt_tokens,
            self.completion_tokens,
            self.cost
        )
    }
}

/// A budget in tokens and money: a run's (a run option,
/// [`WarEngine::with_spend_budget`](crate::engine::WarEngine::with_spend_budget),
/// or a graph default,
/// [`EngineLimits::with_spend_budget`](crate::graph::EngineLimits::with_spend_budget)),
/// or one node activation's cap ([`Aegis::with_spend_cap`](crate::policy::Aegis::with_spend_cap)).
///
/// A retry or a fallback hop whose expected spend would pass what is left
/// is skipped (a [`Skip`] on the node's record, a trace event) and the
/// node's `on_error` handler runs, as for a retry whose wait would pass the
/// run's time budget. When nothing at all is left of the run's budget the
/// run ends with
/// [`EngineError::SpendBudgetExhausted`](crate::error::EngineError::SpendBudgetExhausted).
///
/// `max_hop_price_ratio` refuses a hop to a provider whose input or output
/// price is more than that many times the primary's.
///
/// ```
/// use aegis_runtime::policy::{Money, SpendBudget};
/// let budget = SpendBudget::new()
///     .with_max_tokens(50_000)
///     .with_max_cost(Money::from_usd(0.25).unwrap())
///     .with_max_hop_price_ratio(2.0)
///     .unwrap();
/// assert_eq!(budget.max_hop_price_ratio_permille, Some(2_000));
/// assert!(SpendBudget::new().with_max_hop_price_ratio(f64::NAN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpendBudget {
    /// The most tokens (in and out together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The most money.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<Money>,
    /// The dearest a fallback may be, as a multiple of the primary's input
    /// and output prices, in thousandths (2000 = twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hop_price_ratio_permille: Option<u32>,
}

/// What is left of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Remaining {
    /// Tokens left, when the budget bounds tokens.
    pub tokens: Option<u64>,
    /// Money left, when the budget bounds money.
    pub cost: Option<Money>,
}

impl Remaining {
    /// Whether nothing at all is left of a bound.
    pub fn is_exhausted(&self) -> bool {
        self.tokens == Some(0) || self.cost == Some(Money::ZERO)
    }

    /// Whether `expected` fits in what is left: nothing passes a bound, and
    /// some of each bound is left (a zero expectation fits while anything
    /// is left, as a zero wait fits while any time is).
    pub fn fits(&self, expected: &Spend) -> bool {
        !self.is_exhausted()
            && self.tokens.is_none_or(|t| expected.total_tokens() <= t)
            && self.cost.is_none_or(|c| expected.cost <= c)
    }

    /// The tighter of two.
    #[must_use]
    pub fn min(self, other: Remaining) -> Remaining {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Remaining {
            tokens: min(self.tokens, other.tokens),
            cost: min(self.cost, other.cost),
        }
    }
}

impl fmt::Display for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tokens, self.cost) {
            (Some(t), Some(c)) => write!(f, "{t} tokens and {c} left"),
            (Some(t), None) => write!(f, "{t} tokens left"),
            (None, Some(c)) => write!(f, "{c} left"),
            (None, None) => write!(f, "no bound"),
        }
    }
}

impl SpendBudget {
    /// No bound at all.
    pub const fn new() -> Self {
        SpendBudget {
            max_tokens: None,
            max_cost: None,
            max_hop_price_ratio_permille: None,
        }
    }

    /// Bounds tokens (in and out together).
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: impl Into<Option<u64>>) -> Self {
        self.max_tokens = max_tokens.into();
        self
    }

    /// Bounds money.
    #[must_use]
    pub fn with_max_cost(mut self, max_cost: impl Into<Option<Money>>) -> Self {
        self.max_cost = max_cost.into();
        self
    }

    /// Refuses a fallback hop to a provider whose input or output price is
    /// more than `ratio` times the primary's (both priced by the run's
    /// table). A ratio that is not a finite number of at least 1 is
    /// [`PriceError::InvalidRatio`].
    pub fn with_max_hop_price_ratio(mut self, ratio: f64) -> Result<Self, PriceError> {
        if !ratio.is_finite() || ratio < 1.0 || ratio * 1000.0 > f64::from(u32::MAX) {
            return Err(PriceError::InvalidRatio(ratio));
        }
        // Finite and in range: the conversion cannot truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let permille = (ratio * 1000.0).round() as u32;
        self.max_hop_price_ratio_permille = Some(permille);
        Ok(self)
    }

    /// What is left after `spent`.
    pub fn remaining(&self, spent: &Spend) -> Remaining {
        Remaining {
            tokens: self
                .max_tokens
                .map(|m| m.saturating_sub(spent.total_tokens())),
            cost: self.max_cost.map(|m| m.saturating_sub(spent.cost)),
        }
    }

    /// Whether the budget bounds anything.
    pub fn is_bounded(&self) -> bool {
        self.max_tokens.is_some() || self.max_cost.is_some()
    }
}

/// What was not sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkippedStep {
    /// The node's next attempt.
    Retry {
        /// The attempt that did not run.
        attempt: u32,
    },
    /// A provider of a fallback chain (the primary too, for a request that
    /// does not fit its context window).
    Hop {
        /// The provider not called.
        provider: String,
        /// Its position in the chain (0 = the primary).
        position: u32,
    },
}

/// Why a retry or a hop was skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// Its expected spend would pass what is left of the run's budget or
    /// the node's cap.
    SpendBudget {
        /// What it was expected to spend (an estimate).
        expected: Spend,
        /// What was left.
        remaining: Remaining,
    },
    /// The provider is dearer than the primary beyond the configured ratio:
    /// its input or its output price is more than the ratio times the
    /// primary's.
    PriceRatio {
        /// The primary's price.
        primary: Price,
        /// This provider's.
        candidate: Price,
        /// The ratio allowed, in thousandths.
        max_ratio_permille: u32,
    },
    /// The request cannot fit the provider's context window.
    ContextWindow {
        /// The estimated prompt tokens plus `max_tokens`.
        estimated_tokens: u64,
        /// The provider's declared window.
        window: u64,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::SpendBudget {
                expected,
                remaining,
            } => write!(f, "spend budget: expected {expected}, {remaining}"),
            SkipReason::PriceRatio {
                primary,
                candidate,
                max_ratio_permille,
            } => write!(
                f,
                "price ratio: {} in / {} out per million tokens against the primary's {} / {}, more than {}.{:03}x",
                candidate.input_per_million,
                candidate.output_per_million,
                primary.input_per_million,
                primary.output_per_million,
                max_ratio_permille / 1000,
                max_ratio_permille % 1000
            ),
            SkipReason::ContextWindow {
                estimated_tokens,
                window,
            } => write!(
                f,
                "context window: ~{estimated_tokens} tokens do not fit in {window}"
            ),
        }
    }
}

/// A retry or a hop not sent, and why: on the node's
/// [`NodeExecutionRecord::skips`](crate::waypoint::NodeExecutionRecord::skips)
/// and in a `TraceEvent::StepSkipped`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skip {
    /// What was not sent.
    pub step: SkippedStep,
    /// Why.
    pub reason: SkipReason,
}

impl Skip {
    /// `step` skipped for `reason`.
    pub fn new(step: SkippedStep, reason: SkipReason) -> Self {
        Skip { step, reason }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.step {
            SkippedStep::Retry { attempt } => write!(f, "retry (attempt {attempt}) skipped: ")?,
            SkippedStep::Hop { provider, position } => {
                write!(f, "hop to `{provider}` (position {position}) skipped: ")?;
            }
        }
        write!(f, "{}", self.reason)
    }
}
