//! Reading configuration from the environment: one error type naming the
//! variable, values that are not UTF-8 reported rather than skipped, and
//! one ceiling on every duration a variable may hold.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;
use std::time::Duration;

/// A malformed configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is invalid: {reason}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The variable.
    pub variable: &'static str,
    /// Its value: lossily decoded when it is not UTF-8, and redacted when
    /// the variable holds a secret.
    pub value: String,
    /// What it must be instead.
    pub reason: &'static str,
}

/// The longest duration any `*_SECS` or `*_MS` variable accepts: 100 years
/// (of 365 days), in seconds.
///
/// A larger number parses, but no deadline that far off can be represented
/// on every platform's clock (`u64::MAX` seconds overflows an `Instant`), so
/// it is a [`ConfigError`] naming the variable rather than a silent
/// "forever" or a panic at the first run. Leave a variable unset for its
/// default (no run timeout, no TTL ceiling).
pub const MAX_CONFIG_DURATION_SECS: u64 = 100 * 365 * 24 * 60 * 60;

/// One variable's value as the environment holds it.
///
/// [`EngineConfig::from_lookup`](crate::engine::EngineConfig::from_lookup) and
/// [`NodeCacheConfig::from_lookup`](crate::cache::NodeCacheConfig::from_lookup)
/// accept a lookup returning anything that converts into it: a `String` or
/// `&str` (convenient in tests), or an `OsString` (what
/// [`std::env::var_os`] returns), whose non-UTF-8 values stay visible as
/// [`EnvValue::NotUnicode`] so they are reported, never mistaken for an
/// unset variable.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvValue {
    /// A UTF-8 value.
    Text(String),
    /// A value that is not valid UTF-8.
    NotUnicode(OsString),
}

impl fmt::Debug for EnvValue {
    /// The kind and length only: a value may be a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvValue::Text(s) => write!(f, "Text({} bytes)", s.len()),
            EnvValue::NotUnicode(s) => write!(f, "NotUnicode({} bytes)", s.len()),
        }
    }
}

impl From<String> for EnvValue {
    fn from(s: String) -> Self {
        EnvValue::Text(s)
    }
}

impl From<&str> for EnvValue {
    fn from(s: &str) -> Self {
        EnvValue::Text(s.to_string())
    }
}

impl From<OsString> for EnvValue {
    fn from(s: OsString) -> Self {
        match s.into_string() {
            Ok(text) => EnvValue::Text(text),
            Err(raw) => EnvValue::NotUnicode(raw),
        }
    }
}

impl From<&OsStr> for EnvValue {
    fn from(s: &OsStr) -> Self {
        EnvValue::from(s.to_os_string())
    }
}

/// Reads variables through a lookup, turning each value into text or a
/// [`ConfigError`] naming the variable.
pub(crate) struct Env<F>(pub(crate) F);

impl<F, V> Env<F>
where
    F: Fn(&str) -> Option<V>,
    V: Into<EnvValue>,
{
    /// The variable's text; `None` when unset. A non-UTF-8 value is an
    /// error showing it lossily decoded.
    pub(crate) fn text(&self, variable: &'static str) -> Result<Option<String>, ConfigError> {
        self.read(variable, |raw| raw.to_string_lossy().into_owned())
    }

    /// As [`Env::text`], for a variable holding a secret: an error never
    /// shows its value.
    pub(crate) fn secret(&self, variable: &'static str) -> Result<Option<String>, ConfigError> {
        self.read(variable, |_| crate::error::REDACTED.to_string())
    }

    /// As [`Env::text`], with `shown` deciding what an error shows of a
    /// non-UTF-8 value.
    pub(crate) fn read(
        &self,
        variable: &'static str,
        shown: impl Fn(&OsStr) -> String,
    ) -> Result<Option<String>, ConfigError> {
        match (self.0)(variable).map(Into::into) {
            None => Ok(None),
            Some(EnvValue::Text(text)) => Ok(Some(text)),
            Some(EnvValue::NotUnicode(raw)) => Err(ConfigError {
                variable,
                value: shown(&raw),
                reason: "is not valid UTF-8",
            }),
        }
    }

    /// A whole number at least `min`; `None` when unset.
    pub(crate) fn number<T>(&self, variable: &'static str, min: T) -> Result<Option<T>, ConfigError>
    where
        T: FromStr<Err = ParseIntError> + PartialOrd,
    {
        let Some(raw) = self.text(variable)? else {
            return Ok(None);
        };
        let err = |reason| ConfigError {
            variable,
            value: raw.clone(),
            reason,
        };
        let v: T = raw.trim().parse().map_err(|e: ParseIntError| {
            err(match e.kind() {
                IntErrorKind::PosOverflow => "is too large for this setting",
                _ => "expected a whole non-negative number",
            })
        })?;
        if v < min {
            return Err(err("must be greater than zero"));
        }
        Ok(Some(v))
    }

    /// A duration of whole `unit`s (seconds or milliseconds), at least
    /// `min` and at most [`MAX_CONFIG_DURATION_SECS`]; `None` when unset.
    pub(crate) fn duration(
        &self,
        variable: &'static str,
        unit: DurationUnit,
        min: u64,
    ) -> Result<Option<Duration>, ConfigError> {
        let Some(n) = self.number::<u64>(variable, min)? else {
            return Ok(None);
        };
        let (d, too_long) = match unit {
            DurationUnit::Secs => (
                Duration::from_secs(n),
                "must be at most 3153600000 seconds (100 years); leave it unset for the default",
            ),
            DurationUnit::Millis => (
                Duration::from_millis(n),
                "must be at most 3153600000000 milliseconds (100 years); leave it unset for the default",
            ),
        };
        if d > Duration::from_secs(MAX_CONFIG_DURATION_SECS) {
            return Err(ConfigError {
                variable,
                value: n.to_string(),
                reason: too_long,
            });
        }
        Ok(Some(d))
    }
}

/// The unit a duration variable counts in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DurationUnit {
    Secs,
    Millis,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_never_debug_print_their_text() {
        let v = EnvValue::from("hunter2");
        assert_eq!(format!("{v:?}"), "Text(7 bytes)");
        assert_eq!(EnvValue::from(OsStr::new("x")), EnvValue::Text("x".into()));
    }
}
