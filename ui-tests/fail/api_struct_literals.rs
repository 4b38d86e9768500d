//! The policy types are `#[non_exhaustive]`: outside the crate a struct
//! literal does not compile (a field added later breaks no one); the
//! builders are the way to make one. The .stderr beside this file is its error.
use aegis::graph::EngineLimits;
use aegis::policy::{Aegis, CacheKeySpec, CachePolicy, CacheScope, RetryPolicy, TimeoutPolicy};
use std::time::Duration;

fn main() {
    let _retry = RetryPolicy {
        max_attempts: 5,
        ..RetryPolicy::default()
    };
    let _timeout = TimeoutPolicy {
        run_timeout: Some(Duration::from_secs(30)),
        idle_timeout: None,
        first_chunk: None,
    };
    let _aegis = Aegis {
        retry: None,
        timeout: None,
        on_error: None,
        cache: None,
    };
    let _limits = EngineLimits {
        max_supersteps: 10,
        ..EngineLimits::default()
    };
    let _cache = CachePolicy {
        ttl: Duration::from_secs(60),
        key: CacheKeySpec::Default,
        cache_fallback_results: false,
        scope: CacheScope::Graph,
    };
}
