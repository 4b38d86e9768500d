//! The engine's operator-facing configuration.

use std::time::Duration;

use crate::config::{ConfigError, DurationUnit, Env, EnvValue};
use crate::graph::EngineLimits;

/// Operator configuration of the engine, loadable from the environment.
///
/// | variable | meaning |
/// |---|---|
/// | `APP_ENGINE_RUN_TIMEOUT_SECS` | `run_timeout`, whole seconds (> 0, at most 100 years) |
/// | `APP_ENGINE_MAX_SUPERSTEPS` | `max_supersteps` (> 0) |
/// | `APP_ENGINE_MAX_NODE_VISITS` | `max_node_visits` (> 0) |
/// | `APP_ENGINE_MAX_CONCURRENCY` | `max_concurrency` (> 0) |
/// | `APP_ENGINE_SHUTDOWN_GRACE_SECS` | `shutdown_grace`, whole seconds (at most 100 years) |
///
/// An unset variable keeps the default; a malformed one is an error naming
/// it, never a silent default: a value that is not UTF-8, not a whole
/// number, out of its type's range, or a duration past
/// [`MAX_CONFIG_DURATION_SECS`](crate::engine::MAX_CONFIG_DURATION_SECS). Every duration accepted is therefore one a
/// deadline can be computed from. Per-node policies are code, not
/// configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineConfig {
    /// `APP_ENGINE_RUN_TIMEOUT_SECS`.
    pub run_timeout_secs: Option<u64>,
    /// `APP_ENGINE_MAX_SUPERSTEPS`.
    pub max_supersteps: Option<u32>,
    /// `APP_ENGINE_MAX_NODE_VISITS`.
    pub max_node_visits: Option<u32>,
    /// `APP_ENGINE_MAX_CONCURRENCY`.
    pub max_concurrency: Option<usize>,
    /// `APP_ENGINE_SHUTDOWN_GRACE_SECS`.
    pub shutdown_grace_secs: Option<u64>,
}

impl EngineConfig {
    /// Sets [`run_timeout_secs`](Self::run_timeout_secs):
    /// `APP_ENGINE_RUN_TIMEOUT_SECS`.
    #[must_use]
    pub fn with_run_timeout_secs(mut self, run_timeout_secs: impl Into<Option<u64>>) -> Self {
        self.run_timeout_secs = run_timeout_secs.into();
        self
    }

    /// Sets [`max_supersteps`](Self::max_supersteps): `APP_ENGINE_MAX_SUPERSTEPS`.
    #[must_use]
    pub fn with_max_supersteps(mut self, max_supersteps: impl Into<Option<u32>>) -> Self {
        self.max_supersteps = max_supersteps.into();
        self
    }

    /// Sets [`max_node_visits`](Self::max_node_visits):
    /// `APP_ENGINE_MAX_NODE_VISITS`.
    #[must_use]
    pub fn with_max_node_visits(mut self, max_node_visits: impl Into<Option<u32>>) -> Self {
        self.max_node_visits = max_node_visits.into();
        self
    }

    /// Sets [`max_concurrency`](Self::max_concurrency):
    /// `APP_ENGINE_MAX_CONCURRENCY`.
    #[must_use]
    pub fn with_max_concurrency(mut self, max_concurrency: impl Into<Option<usize>>) -> Self {
        self.max_concurrency = max_concurrency.into();
        self
    }

    /// Sets [`shutdown_grace_secs`](Self::shutdown_grace_secs):
    /// `APP_ENGINE_SHUTDOWN_GRACE_SECS`.
    #[must_use]
    pub fn with_shutdown_grace_secs(mut self, shutdown_grace_secs: impl Into<Option<u64>>) -> Self {
        self.shutdown_grace_secs = shutdown_grace_secs.into();
        self
    }
}

impl EngineConfig {
    /// Reads the process environment (`std::env::var_os`, so a value that
    /// is not UTF-8 is reported, not skipped).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k: &str| std::env::var_os(k))
    }

    /// Reads variables through `lookup`: a map in tests (returning `String`
    /// or `&str`), the environment in [`EngineConfig::from_env`] (returning
    /// `OsString`). See [`EnvValue`].
    pub fn from_lookup<V: Into<EnvValue>>(
        lookup: impl Fn(&str) -> Option<V>,
    ) -> Result<Self, ConfigError> {
        let env = Env(lookup);
        let secs = |variable, min| {
            env.duration(variable, DurationUnit::Secs, min)
                .map(|d| d.map(|d| d.as_secs()))
        };
        Ok(EngineConfig {
            run_timeout_secs: secs("APP_ENGINE_RUN_TIMEOUT_SECS", 1)?,
            max_supersteps: env.number("APP_ENGINE_MAX_SUPERSTEPS", 1)?,
            max_node_visits: env.number("APP_ENGINE_MAX_NODE_VISITS", 1)?,
            max_concurrency: env.number("APP_ENGINE_MAX_CONCURRENCY", 1)?,
            shutdown_grace_secs: secs("APP_ENGINE_SHUTDOWN_GRACE_SECS", 0)?,
        })
    }

    /// The limits this configuration describes, defaults filling the gaps.
    pub fn limits(&self) -> EngineLimits {
        let d = EngineLimits::default();
        EngineLimits {
            max_supersteps: self.max_supersteps.unwrap_or(d.max_supersteps),
            max_node_visits: self.max_node_visits.unwrap_or(d.max_node_visits),
            run_timeout: self
                .run_timeout_secs
                .map(Duration::from_secs)
                .or(d.run_timeout),
            max_concurrency: self.max_concurrency.unwrap_or(d.max_concurrency),
            shutdown_grace: self
                .shutdown_grace_secs
                .map(Duration::from_secs)
                .unwrap_or(d.shutdown_grace),
            spend_budget: d.spend_budget,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_CONFIG_DURATION_SECS;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn reads_every_variable() {
        let cfg = EngineConfig::from_lookup(lookup(&[
            ("APP_ENGINE_RUN_TIMEOUT_SECS", "30"),
            ("APP_ENGINE_MAX_SUPERSTEPS", "50"),
            ("APP_ENGINE_MAX_NODE_VISITS", "7"),
            ("APP_ENGINE_MAX_CONCURRENCY", "4"),
            ("APP_ENGINE_SHUTDOWN_GRACE_SECS", "0"),
        ]))
        .unwrap();
        let l = cfg.limits();
        assert_eq!(l.run_timeout, Some(Duration::from_secs(30)));
        assert_eq!(
            (l.max_supersteps, l.max_node_visits, l.max_concurrency),
            (50, 7, 4)
        );
        assert_eq!(l.shutdown_grace, Duration::ZERO);
        assert_eq!(
            EngineConfig::from_lookup(lookup(&[])).unwrap().limits(),
            EngineLimits::default()
        );
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let err = EngineConfig::from_lookup(lookup(&[("APP_ENGINE_MAX_SUPERSTEPS", "lots")]))
            .unwrap_err();
        assert_eq!(err.variable, "APP_ENGINE_MAX_SUPERSTEPS");
        assert!(
            err.to_string()
                .contains("APP_ENGINE_MAX_SUPERSTEPS=\"lots\"")
        );
        let err =
            EngineConfig::from_lookup(lookup(&[("APP_ENGINE_RUN_TIMEOUT_SECS", "0")])).unwrap_err();
        assert_eq!(err.reason, "must be greater than zero");
        assert!(
            EngineConfig::from_lookup(lookup(&[("APP_ENGINE_MAX_CONCURRENCY", "-1")])).is_err()
        );
    }

    #[test]
    fn numbers_past_their_range_name_the_variable() {
        for (var, value, reason) in [
            (
                "APP_ENGINE_MAX_SUPERSTEPS",
                "4294967296",
                "is too large for this setting",
            ),
            (
                "APP_ENGINE_MAX_NODE_VISITS",
                "99999999999999999999999",
                "is too large for this setting",
            ),
            (
                "APP_ENGINE_RUN_TIMEOUT_SECS",
                "18446744073709551616",
                "is too large for this setting",
            ),
            (
                "APP_ENGINE_RUN_TIMEOUT_SECS",
                "18446744073709551615",
                "must be at most 3153600000 seconds (100 years); leave it unset for the default",
            ),
            (
                "APP_ENGINE_SHUTDOWN_GRACE_SECS",
                "3153600001",
                "must be at most 3153600000 seconds (100 years); leave it unset for the default",
            ),
        ] {
            let err = EngineConfig::from_lookup(lookup(&[(var, value)])).unwrap_err();
            assert_eq!((err.variable, err.reason), (var, reason), "{var}={value}");
            assert!(err.to_string().starts_with(var), "{err}");
        }
        // The largest accepted durations are deadlines the clock can hold.
        let cfg = EngineConfig::from_lookup(lookup(&[
            ("APP_ENGINE_RUN_TIMEOUT_SECS", "3153600000"),
            ("APP_ENGINE_SHUTDOWN_GRACE_SECS", "3153600000"),
            ("APP_ENGINE_MAX_SUPERSTEPS", "4294967295"),
        ]))
        .unwrap();
        let limits = cfg.limits();
        let longest = Duration::from_secs(MAX_CONFIG_DURATION_SECS);
        assert_eq!(limits.run_timeout, Some(longest));
        assert_eq!(limits.shutdown_grace, longest);
        assert_eq!(limits.max_supersteps, u32::MAX);
        assert!(std::time::Instant::now().checked_add(longest).is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_value_that_is_not_utf8_is_an_error_never_a_default() {
        use std::os::unix::ffi::OsStringExt;
        for var in [
            "APP_ENGINE_RUN_TIMEOUT_SECS",
            "APP_ENGINE_MAX_SUPERSTEPS",
            "APP_ENGINE_MAX_NODE_VISITS",
            "APP_ENGINE_MAX_CONCURRENCY",
            "APP_ENGINE_SHUTDOWN_GRACE_SECS",
        ] {
            let raw = OsString::from_vec(vec![b'3', 0xff, b'0']);
            let err =
                EngineConfig::from_lookup(|k: &str| (k == var).then(|| raw.clone())).unwrap_err();
            assert_eq!((err.variable, err.reason), (var, "is not valid UTF-8"));
            assert_eq!(err.value, "3\u{fffd}0");
        }
        // An OsString lookup reads UTF-8 values as before.
        let cfg = EngineConfig::from_lookup(|k: &str| {
            (k == "APP_ENGINE_MAX_SUPERSTEPS").then(|| OsString::from("12"))
        })
        .unwrap();
        assert_eq!(cfg.max_supersteps, Some(12));
    }
}
