//! Fault scripts and the faulty cache backend.
//!
//! An attempt's script is a pure function of (seed, node, superstep,
//! attempt): the node running it and the reference model read the same
//! script, and a resumed run that re-executes an activation from attempt 1
//! replays it exactly.

use aegis::cache::CacheClock;
use aegis::cache::CacheEntry;
use aegis::cache::CacheKey;
use aegis::cache::NodeCache;
use aegis::cache::NodeCacheError;
use aegis::prelude::*;
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The panic message of injected panics; the chaos panic hook keeps quiet
/// about these (and only these).
pub(crate) const PANIC_MARK: &str = "chaos: injected panic";

/// How an attempt ends once its work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Ok,
    Transient,
    Permanent,
    Unknown,
    Panic,
    /// Never ends and never beats: only a timeout (or shutdown) stops it.
    Hang,
}

/// One attempt's script: `steps` sleeps of `step` (beating after each when
/// `beats`), then `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) steps: u32,
    pub(crate) step: Duration,
    pub(crate) beats: bool,
    pub(crate) end: End,
}

impl Plan {
    /// How long the work takes; `None` for a hang.
    pub(crate) fn work(&self) -> Option<Duration> {
        (self.end != End::Hang).then(|| self.step * self.steps)
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which graph an attempt runs in: the root, or the child thread of the
/// Battalion node `parent` on its `visit`-th activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Scope {
    Root,
    Child { parent: usize, visit: u32 },
}

/// Where an attempt runs: everything its script depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Site {
    pub(crate) scope: Scope,
    pub(crate) node: usize,
    /// The task index, for a mustered task.
    pub(crate) task: Option<u32>,
    pub(crate) superstep: u32,
    pub(crate) attempt: u32,
}

/// The script of one attempt. `fault_rate` is the seed's share of faulty
/// attempts; `bounded` says whether the node has a timeout that can end a
/// hang (without one a hang would stall the run, so it becomes an error).
pub(crate) fn plan(seed: u64, fault_rate: f64, site: Site, bounded: bool) -> Plan {
    let (parent, visit) = match site.scope {
        Scope::Root => (0, 0),
        Scope::Child { parent, visit } => (parent as u64 + 1, u64::from(visit)),
    };
    let parts = [
        parent,
        visit,
        site.node as u64 + 1,
        site.task.map_or(0, |t| u64::from(t) + 1),
        u64::from(site.superstep),
        u64::from(site.attempt),
    ];
    let key = parts.iter().enumerate().fold(mix(seed), |k, (i, p)| {
        mix(k ^ mix(p ^ ((i as u64 + 1) << 56)))
    });
    let mut rng = StdRng::seed_from_u64(mix(key));
    let step = Duration::from_millis(
        *[100u64, 200, 300, 1000]
            .get(rng.random_range(0..4))
            .unwrap_or(&100),
    );
    if !rng.random_bool(fault_rate) {
        return Plan {
            steps: rng.random_range(0..=2),
            step,
            beats: rng.random_bool(0.5),
            end: End::Ok,
        };
    }
    let roll = rng.random_range(0..100);
    let (steps, beats, end) = match roll {
        0..35 => (0, false, End::Transient),
        35..45 => (0, false, End::Permanent),
        45..58 => (rng.random_range(0..=1), false, End::Unknown),
        58..68 => (0, false, End::Panic),
        68..83 => (0, false, End::Hang),
        // Slow heartbeating work, that may or may not outlast a bound.
        _ => (rng.random_range(3..=8), rng.random_bool(0.8), End::Ok),
    };
    let end = if end == End::Hang && !bounded {
        End::Transient
    } else {
        end
    };
    Plan {
        steps,
        step,
        beats,
        end,
    }
}

/// A `NodeCache` that fails a share of its calls, wrapping a real one.
pub(crate) struct FaultyCache {
    inner: InMemoryNodeCache,
    rng: Mutex<StdRng>,
    failure_rate: f64,
    pub(crate) injected: AtomicU64,
}

impl FaultyCache {
    pub(crate) fn new(seed: u64, failure_rate: f64) -> Self {
        FaultyCache {
            inner: InMemoryNodeCache::new(),
            rng: Mutex::new(StdRng::seed_from_u64(mix(seed ^ 0xcac4e))),
            failure_rate,
            injected: AtomicU64::new(0),
        }
    }

    fn fault(&self, operation: &'static str) -> Result<(), NodeCacheError> {
        let (fail, timeout) = {
            let mut rng = self.rng.lock().unwrap();
            (rng.random_bool(self.failure_rate), rng.random_bool(0.5))
        };
        if !fail {
            return Ok(());
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Err(if timeout {
            NodeCacheError::Timeout {
                operation,
                after: Duration::from_millis(250),
            }
        } else {
            NodeCacheError::Unavailable {
                backend: "chaos",
                message: "injected fault".to_string(),
            }
        })
    }
}

#[async_trait]
impl NodeCache for FaultyCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, NodeCacheError> {
        self.fault("get")?;
        self.inner.get(key).await
    }

    async fn put(&self, key: &CacheKey, entry: &CacheEntry) -> Result<(), NodeCacheError> {
        self.fault("put")?;
        self.inner.put(key, entry).await
    }

    async fn invalidate_prefix(&self, prefix: &str) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_prefix(prefix).await
    }

    async fn invalidate_all(&self) -> Result<u64, NodeCacheError> {
        self.inner.invalidate_all().await
    }

    fn clock(&self) -> Option<&CacheClock> {
        self.inner.clock()
    }

    fn backend_name(&self) -> &'static str {
        "chaos"
    }
}
