//! The Aegis side of the peer benchmarks: the five workloads of issue 10,
//! timed one whole run at a time, printed as
//! `RESULT <workload> aegis waypoints <µs per node or task>`, one line per
//! run, for `bench/peers/run.sh` to aggregate.
//!
//! Aegis always writes a waypoint per superstep (there is no "no
//! checkpointing" mode), so every figure here is with the in-memory
//! waypoint store.
//!
//! Usage: `aegis-peer-bench [--samples N]` (default 5 timed runs per
//! workload, after one warm-up run); `--only <workload>` runs one (a name
//! ending in `_`: every workload it starts), for profiling. Built with
//! `--features kept`, each workload's last run also prints (to stderr) the
//! bytes and allocations it left live per node or task: what the waypoints
//! it keeps cost.

use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "kept")]
mod kept;

#[cfg(feature = "kept")]
#[global_allocator]
static COUNTING: kept::Counting = kept::Counting;

type BenchError = Box<dyn std::error::Error>;

fn schema() -> Result<BattlefieldSchema, BenchError> {
    Ok(BattlefieldSchema::new(vec![
        FieldSpec::new(FieldName::new("n")?, DispatchRule::Sum, None, false),
        FieldSpec::new(FieldName::new("items")?, DispatchRule::Append, None, false),
    ]))
}

fn limits(supersteps: u32) -> EngineLimits {
    EngineLimits::default()
        .with_max_supersteps(supersteps + 10)
        .with_max_node_visits(10)
        .with_max_concurrency(2048)
}

/// A trivial node: adds 1 to the counter.
fn add_one() -> NodeSpec {
    NodeSpec::from_fn("add_one", |_, _| {
        Box::pin(async {
            let mut d = StateDelta::new();
            d.set("n", 1)?;
            Ok(d.into())
        })
    })
}

/// Adds 1 to the counter, after failing its first attempt with a transient error.
fn flaky_add_one() -> NodeSpec {
    NodeSpec::from_fn("flaky_add_one", |_, ctx| {
        let first = ctx.attempt() == 1;
        Box::pin(async move {
            if first {
                return Err(StateNodeError::transient("transient failure"));
            }
            let mut d = StateDelta::new();
            d.set("n", 1)?;
            Ok(d.into())
        })
    })
}

fn chain(n: u32, node: fn() -> NodeSpec) -> Result<WarGraph, BenchError> {
    let mut g = WarGraph::new(schema()?, limits(n));
    let mut prev = START.to_string();
    for i in 0..n {
        let id = format!("n{i:05}");
        g.add_node(id.as_str(), node());
        g.add_edge(prev.as_str(), id.as_str());
        prev = id;
    }
    g.add_edge(prev.as_str(), END);
    Ok(g)
}

/// (c): a retry policy and a timeout policy on every node.
fn guarded() -> Aegis {
    Aegis::new()
        .with_retry(RetryPolicy::default())
        .with_timeout(TimeoutPolicy::run(Duration::from_secs(30)))
}

/// (d): retry transient failures with no backoff.
fn zero_backoff() -> Aegis {
    Aegis::new().with_retry(
        RetryPolicy::default()
            .with_max_attempts(3)
            .with_initial_interval(Duration::ZERO)
            .with_max_interval(Duration::ZERO)
            .with_jitter(false),
    )
}

/// (b): one node musters `n` tasks to one worker, which appends its payload.
fn muster(n: u32) -> Result<WarGraph, BenchError> {
    let split = NodeSpec::from_fn("split", move |_, _| {
        Box::pin(async move {
            let tasks = (0..n).map(|i| (format!("t{i}"), json!(i)));
            Ok(Directive::muster(StateDelta::new(), "worker", tasks))
        })
    });
    let worker = NodeSpec::from_fn("worker", |_, ctx| {
        let payload = ctx.task().map(|t| t.payload.clone()).unwrap_or(Value::Null);
        Box::pin(async move {
            let mut d = StateDelta::new();
            d.set("items", payload)?;
            Ok(d.into())
        })
    });
    let mut g = WarGraph::new(schema()?, limits(4));
    g.add_node("split", split)
        .add_worker_template("worker", worker)
        .add_edge(START, "split")
        .add_edge("worker", END);
    Ok(g)
}

fn engine() -> WarEngine {
    WarEngine::new(InMemoryWaypointStore::new())
}

struct Runner {
    rt: tokio::runtime::Runtime,
    samples: usize,
    thread: u64,
}

impl Runner {
    /// Runs `graph` once per sample (after a warm-up) and prints µs per unit.
    fn measure(
        &mut self,
        workload: &str,
        graph: &WarGraph,
        engine: &WarEngine,
        units: u32,
        input: impl Fn(usize) -> Value,
    ) -> Result<(), BenchError> {
        for sample in 0..=self.samples {
            self.thread += 1;
            let thread = format!("t{}", self.thread);
            let input = input(sample);
            #[cfg(feature = "kept")]
            let before = kept::live();
            let t0 = Instant::now();
            let out = self.rt.block_on(engine.start(graph, &thread, input))?;
            let elapsed = t0.elapsed();
            if !out.is_completed() {
                return Err(format!("{workload}: run ended {}", out.name()).into());
            }
            #[cfg(feature = "kept")]
            if sample == self.samples {
                drop(out);
                let (after, n) = (kept::live(), f64::from(units));
                eprintln!(
                    "KEPT\t{workload}\t{:.1} bytes\t{:.2} blocks per unit",
                    (after.0 - before.0) as f64 / n,
                    (after.1 - before.1) as f64 / n,
                );
            }
            if sample > 0 {
                let per_unit = elapsed.as_secs_f64() * 1e6 / f64::from(units);
                println!("RESULT\t{workload}\taegis\twaypoints\t{per_unit:.3}");
            }
        }
        Ok(())
    }
}

fn cached(mut g: WarGraph) -> WarGraph {
    g.with_default_aegis(Aegis::new().with_cache(CachePolicy::new(
        Duration::from_secs(3600),
        CacheKeySpec::Default,
    )));
    g
}

fn main() -> Result<(), BenchError> {
    let mut samples = 5usize;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--samples" => samples = args.next().ok_or("--samples needs a value")?.parse()?,
            // For profiling: only this workload (`e_` and other names ending
            // in `_`: every workload whose name starts with it).
            "--only" => only = Some(args.next().ok_or("--only needs a workload name")?),
            // Kept for old profiling commands: `--chain N` is `--only a_chain_N`.
            "--chain" => {
                let n: u32 = args.next().ok_or("--chain needs a value")?.parse()?;
                only = Some(format!("a_chain_{n}"));
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let mut r = Runner {
        rt,
        samples,
        thread: 0,
    };
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|o| name == o || (o.ends_with('_') && name.starts_with(o)))
    };
    let empty = |_| json!({});

    for n in [100u32, 1_000, 10_000] {
        let name = format!("a_chain_{n}");
        if wanted(&name) {
            r.measure(&name, &chain(n, add_one)?, &engine(), n, empty)?;
        }
    }

    if wanted("b_fanout_1000") {
        r.measure("b_fanout_1000", &muster(1_000)?, &engine(), 1_000, empty)?;
    }
    if wanted("b_muster_100000") {
        r.measure(
            "b_muster_100000",
            &muster(100_000)?,
            &engine(),
            100_000,
            empty,
        )?;
    }

    if wanted("c_policies_1000") {
        let mut g = chain(1_000, add_one)?;
        g.with_default_aegis(guarded());
        r.measure("c_policies_1000", &g, &engine(), 1_000, empty)?;
    }

    if wanted("d_retry_once_1000") {
        let mut g = chain(1_000, flaky_add_one)?;
        g.with_default_aegis(zero_backoff());
        r.measure("d_retry_once_1000", &g, &engine(), 1_000, empty)?;
    }

    // (e): a 100-node chain, every node cached. A miss runs with an input
    // never seen before; a hit repeats the input of an earlier run; the
    // same chain with no cache policy is what a hit must beat.
    let g = cached(chain(100, add_one)?);
    let cache = engine().with_node_cache(InMemoryNodeCache::new());
    if wanted("e_cache_miss_100") {
        let round = std::process::id();
        r.measure(
            "e_cache_miss_100",
            &g,
            &cache,
            100,
            |s| json!({ "n": u64::from(round) * 1_000 + s as u64 }),
        )?;
    }
    // The warm-up run stores what the timed runs hit.
    if wanted("e_cache_hit_100") {
        r.measure("e_cache_hit_100", &g, &cache, 100, |_| json!({ "n": -1 }))?;
    }
    if wanted("e_no_cache_100") {
        r.measure(
            "e_no_cache_100",
            &chain(100, add_one)?,
            &engine(),
            100,
            empty,
        )?;
    }

    // (f): cache hits with 100 and with 10,000 entries held: the same hit
    // must cost the same however full the cache is.
    for entries in [100u32, 10_000] {
        let name = format!("f_cache_hit_{entries}_entries");
        if !wanted(&name) {
            continue;
        }
        let g = cached(chain(100, add_one)?);
        let cache = Arc::new(InMemoryNodeCache::new().with_max_entries(20_000));
        let engine = engine().with_node_cache(cache.clone());
        // Each distinct input stores one entry per node; the last is the
        // input the timed runs repeat.
        for fill in 0..entries / 100 {
            r.thread += 1;
            let thread = format!("t{}", r.thread);
            let input = json!({ "n": i64::from(fill) - 1_000_000 });
            r.rt.block_on(engine.start(&g, &thread, input))?;
        }
        if cache.len() != entries as usize {
            return Err(format!("{name}: {} entries, not {entries}", cache.len()).into());
        }
        let last = i64::from(entries / 100) - 1 - 1_000_000;
        r.measure(&name, &g, &engine, 100, |_| json!({ "n": last }))?;
    }
    Ok(())
}
