//! Run limits and their operator-facing configuration.

use std::time::Duration;

/// Bounds on one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineLimits {
    /// The most supersteps a thread may take (`RecursionLimitExceeded`).
    pub max_supersteps: u32,
    /// The most activations of one node in a thread (`NodeVisitLimitExceeded`).
    pub max_node_visits: u32,
    /// The budget of one `start`/`resume` call (`RunTimeoutExceeded`); it
    /// nests outside every per-attempt bound. `None`: unbounded.
    pub run_timeout: Option<Duration>,
    /// The most activations of one superstep running at once.
    pub max_concurrency: usize,
    /// How long in-flight attempts may finish after cancellation.
    pub shutdown_grace: Duration,
}

impl Default for EngineLimits {
    /// 1,000 supersteps, 100 visits per node, no run timeout, 64 concurrent
    /// activations, 5 s shutdown grace.
    fn default() -> Self {
        EngineLimits {
            max_supersteps: 1_000,
            max_node_visits: 100,
            run_timeout: None,
            max_concurrency: 64,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// A malformed configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is invalid: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What it must be instead.
    pub reason: &'static str,
}

/// Operator configuration of the engine, loadable from the environment.
///
/// | variable | meaning |
/// |---|---|
/// | `APP_ENGINE_RUN_TIMEOUT_SECS` | `run_timeout`, whole seconds (> 0) |
/// | `APP_ENGINE_MAX_SUPERSTEPS` | `max_supersteps` (> 0) |
/// | `APP_ENGINE_MAX_NODE_VISITS` | `max_node_visits` (> 0) |
/// | `APP_ENGINE_MAX_CONCURRENCY` | `max_concurrency` (> 0) |
/// | `APP_ENGINE_SHUTDOWN_GRACE_SECS` | `shutdown_grace`, whole seconds |
///
/// An unset variable keeps the default; a malformed one is an error naming
/// it, never a silent default. Per-node policies are code, not configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `lookup` (a map in tests, the environment in
    /// [`EngineConfig::from_env`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        fn parse<T: std::str::FromStr + PartialEq + Default>(
            lookup: &impl Fn(&str) -> Option<String>,
            variable: &'static str,
            allow_zero: bool,
        ) -> Result<Option<T>, ConfigError> {
            let Some(raw) = lookup(variable) else {
                return Ok(None);
            };
            let err = |reason| ConfigError {
                variable,
                value: raw.clone(),
                reason,
            };
            let v: T = raw
                .trim()
                .parse()
                .map_err(|_| err("expected a whole non-negative number"))?;
            if !allow_zero && v == T::default() {
                return Err(err("must be greater than zero"));
            }
            Ok(Some(v))
        }
        Ok(EngineConfig {
            run_timeout_secs: parse(&lookup, "APP_ENGINE_RUN_TIMEOUT_SECS", false)?,
            max_supersteps: parse(&lookup, "APP_ENGINE_MAX_SUPERSTEPS", false)?,
            max_node_visits: parse(&lookup, "APP_ENGINE_MAX_NODE_VISITS", false)?,
            max_concurrency: parse(&lookup, "APP_ENGINE_MAX_CONCURRENCY", false)?,
            shutdown_grace_secs: parse(&lookup, "APP_ENGINE_SHUTDOWN_GRACE_SECS", true)?,
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
}
