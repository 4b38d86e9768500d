//! Money and prices: exact integer amounts (nano-dollars), so a run's
//! spend adds up the same whatever the order of its attempts (no float
//! accumulation), and a price table supplied by the user (nothing is
//! fetched).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// Nano-dollars in one dollar.
const NANOS_PER_USD: u64 = 1_000_000_000;

/// An amount of money in US dollars, held exactly as whole nano-dollars
/// (10⁻⁹ USD). Sums saturate instead of overflowing.
///
/// ```
/// use aegis_runtime::policy::Money;
/// let cent = Money::from_usd(0.01).unwrap();
/// assert_eq!(cent.nano_usd(), 10_000_000);
/// assert_eq!(cent.saturating_add(cent).to_string(), "$0.020000");
/// assert!(Money::from_usd(f64::NAN).is_err());
/// assert!(Money::from_usd(-1.0).is_err());
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Money(u64);

impl Money {
    /// Nothing.
    pub const ZERO: Money = Money(0);

    /// `nano_usd` nano-dollars.
    pub const fn from_nano_usd(nano_usd: u64) -> Self {
        Money(nano_usd)
    }

    /// `usd` dollars, rounded to the nearest nano-dollar. NaN, infinite,
    /// negative or too large an amount is a [`PriceError`].
    pub fn from_usd(usd: f64) -> Result<Self, PriceError> {
        if usd.is_nan() || usd.is_infinite() {
            return Err(PriceError::NotFinite(usd));
        }
        if usd < 0.0 {
            return Err(PriceError::Negative(usd));
        }
        let nanos = (usd * NANOS_PER_USD as f64).round();
        // u64::MAX as f64 rounds up to 2^64, itself out of range.
        if nanos >= u64::MAX as f64 {
            return Err(PriceError::TooLarge(usd));
        }
        // In range and integral: the conversion is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Money(nanos as u64))
    }

    /// The amount in nano-dollars.
    pub const fn nano_usd(self) -> u64 {
        self.0
    }

    /// The amount in dollars, for display (not for sums).
    pub fn as_usd(self) -> f64 {
        self.0 as f64 / NANOS_PER_USD as f64
    }

    /// The sum, saturating.
    #[must_use]
    pub const fn saturating_add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// The difference, or zero.
    #[must_use]
    pub const fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }
}

impl fmt::Display for Money {
    /// Dollars to the micro-dollar: `$0.001250`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.div_ceil(1_000);
        write!(f, "${}.{:06}", micros / 1_000_000, micros % 1_000_000)
    }
}

/// Why a price or an amount was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// NaN or infinite.
    #[error("a price must be a finite number, not {0}")]
    NotFinite(f64),
    /// Below zero.
    #[error("a price cannot be negative ({0})")]
    Negative(f64),
    /// More nano-dollars than a `u64` holds.
    #[error("a price of {0} dollars is too large")]
    TooLarge(f64),
    /// A hop price ratio that is not a finite number of at least 1.
    #[error("a hop price ratio must be a finite number of at least 1, not {0}")]
    InvalidRatio(f64),
}

/// What a model costs: dollars per million input (prompt) tokens and per
/// million output (completion) tokens.
///
/// ```
/// use aegis_runtime::policy::{Money, Price};
/// let price = Price::per_million(0.15, 0.60).unwrap();
/// // 1,000 tokens in and 500 out: 0.00015 + 0.0003 dollars.
/// assert_eq!(price.cost(1_000, 500), Money::from_nano_usd(450_000));
/// assert!(Price::per_million(f64::INFINITY, 1.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// Per million input tokens.
    pub input_per_million: Money,
    /// Per million output tokens.
    pub output_per_million: Money,
}

impl Price {
    /// A price of `input_per_million` and `output_per_million`.
    pub const fn new(input_per_million: Money, output_per_million: Money) -> Self {
        Price {
            input_per_million,
            output_per_million,
        }
    }

    /// A price in dollars per million tokens; NaN, infinite or negative
    /// dollars are a [`PriceError`].
    pub fn per_million(input_usd: f64, output_usd: f64) -> Result<Self, PriceError> {
        Ok(Price::new(
            Money::from_usd(input_usd)?,
            Money::from_usd(output_usd)?,
        ))
    }

    /// Whether this price is more than `permille` thousandths of `base` on
    /// either side (input or output). A base of zero on a side makes any
    /// positive price there dearer.
    pub fn exceeds(&self, base: &Price, permille: u32) -> bool {
        let over =
            |p: Money, b: Money| u128::from(p.0) * 1000 > u128::from(b.0) * u128::from(permille);
        over(self.input_per_million, base.input_per_million)
            || over(self.output_per_million, base.output_per_million)
    }

    /// What `input` tokens in and `output` tokens out cost, rounded up to
    /// the nano-dollar once for the whole call (saturating).
    pub fn cost(&self, input: u64, output: u64) -> Money {
        let total = u128::from(input) * u128::from(self.input_per_million.0)
            + u128::from(output) * u128::from(self.output_per_million.0);
        let nanos = total.div_ceil(1_000_000);
        Money(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The prices of the models a run may call, by provider name (what
/// [`LlmPort::get_provider_name`](crate::llm::LlmPort::get_provider_name)
/// returns) and model; supplied by the user, never fetched.
///
/// A lookup tries the exact model, then the provider's catch-all price
/// ([`PriceTable::with_provider_price`]). A call whose provider and model
/// have no price counts its tokens but no money.
///
/// ```
/// use aegis_runtime::policy::{Price, PriceTable};
/// let prices = PriceTable::new()
///     .with_price("openai", "gpt-4o-mini", Price::per_million(0.15, 0.60).unwrap())
///     .with_provider_price("ollama", Price::default());
/// assert!(prices.price("openai", "gpt-4o-mini").is_some());
/// assert_eq!(prices.price("ollama", "llama3"), Some(Price::default()));
/// assert!(prices.price("openai", "o3").is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceTable {
    models: HashMap<(String, String), Price>,
    providers: HashMap<String, Price>,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prices `model` at `provider`.
    #[must_use]
    pub fn with_price(
        mut self,
        provider: impl Into<String>,
        model: impl Into<String>,
        price: Price,
    ) -> Self {
        self.models.insert((provider.into(), model.into()), price);
        self
    }

    /// Prices every model of `provider` not priced on its own.
    #[must_use]
    pub fn with_provider_price(mut self, provider: impl Into<String>, price: Price) -> Self {
        self.providers.insert(provider.into(), price);
        self
    }

    /// The price of `model` at `provider`, if the table has one.
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        self.models
            .get(&(provider.to_string(), model.to_string()))
            .or_else(|| self.providers.get(provider))
            .copied()
    }

    /// Whether the table prices nothing.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.providers.is_empty()
    }
}
