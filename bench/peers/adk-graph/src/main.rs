//! The adk-graph side of the peer benchmarks: the five workloads of issue 10,
//! timed one whole run at a time, printed as
//! `RESULT <workload> adk-graph <none|memory> <µs per node or task>`.
//! Graphs are compiled once per workload; only `invoke` is timed.
//!
//! adk-graph has no `Send`/Muster: workload (b) is 1,000 static branches
//! from one node, each appending to a list channel, which is how an
//! adk-graph user fans out to a fixed number of workers.
//!
//! Usage: `adk-graph-peer-bench [--samples N]` (default 5 timed runs per
//! workload and checkpointer, after one warm-up run).

use adk_graph::cache::{CacheBackend, NodeCachePolicy};
use adk_graph::graph::NodeDefaults;
use adk_graph::retry::RetryPolicy;
use adk_graph::{
    CompiledGraph, END, ExecutionConfig, GraphAgent, GraphError, MemoryCheckpointer, NodeOutput,
    Reducer, START, State, StateGraph, StateSchema, TimeoutPolicy,
};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type BenchError = Box<dyn std::error::Error>;

fn schema() -> StateSchema {
    StateSchema::builder()
        .channel_with_reducer("n", Reducer::Sum)
        .list_channel("items")
        .build()
}

fn name(i: u32) -> String {
    format!("n{i:05}")
}

fn chain(n: u32) -> StateGraph {
    let mut g = StateGraph::new(schema());
    let mut prev = START.to_string();
    for i in 0..n {
        let id = name(i);
        g = g
            .add_node_fn(&id, |_ctx| async {
                Ok(NodeOutput::new().with_update("n", json!(1)))
            })
            .add_edge(&prev, &id);
        prev = id;
    }
    g.add_edge(&prev, END)
}

/// Every node fails its first attempt of each run with a transient error.
fn flaky_chain(n: u32, failed: Arc<Mutex<HashSet<String>>>) -> StateGraph {
    let mut g = StateGraph::new(schema());
    let mut prev = START.to_string();
    for i in 0..n {
        let id = name(i);
        let failed = failed.clone();
        let me = id.clone();
        g = g
            .add_node_fn(&id, move |_ctx| {
                let first = failed
                    .lock()
                    .map(|mut f| f.insert(me.clone()))
                    .unwrap_or(false);
                async move {
                    if first {
                        return Err(GraphError::NodeExecutionFailed {
                            node: "flaky".to_string(),
                            message: "transient failure".to_string(),
                        });
                    }
                    Ok(NodeOutput::new().with_update("n", json!(1)))
                }
            })
            .add_edge(&prev, &id);
        prev = id;
    }
    g.add_edge(&prev, END)
}

fn fan_out(n: u32) -> StateGraph {
    let mut g = StateGraph::new(schema())
        .add_node_fn("split", |_ctx| async { Ok(NodeOutput::new()) })
        .add_edge(START, "split");
    for i in 0..n {
        let id = format!("w{i:05}");
        g = g
            .add_node_fn(&id, move |_ctx| async move {
                Ok(NodeOutput::new().with_update("items", json!([i])))
            })
            .add_edge("split", &id)
            .add_edge(&id, END);
    }
    g
}

fn cached_chain(n: u32, memory: bool) -> Result<GraphAgent, BenchError> {
    let mut b = GraphAgent::builder("cached").state_schema(schema());
    let mut prev = START.to_string();
    for i in 0..n {
        let id = name(i);
        b = b
            .node_fn(&id, |_ctx| async {
                Ok(NodeOutput::new().with_update("n", json!(1)))
            })
            .edge(&prev, &id)
            .node_cache(
                &id,
                NodeCachePolicy {
                    backend: CacheBackend::InMemory {
                        max_entries: 100_000,
                    },
                    ttl: Some(Duration::from_secs(3600)),
                },
            );
        prev = id;
    }
    b = b.edge(&prev, END).recursion_limit(n as usize + 10);
    if memory {
        b = b.checkpointer(MemoryCheckpointer::new());
    }
    Ok(b.build()?)
}

fn finish(g: CompiledGraph, units: u32, memory: bool) -> CompiledGraph {
    let g = g.with_recursion_limit(units as usize + 10);
    if memory {
        g.with_checkpointer(MemoryCheckpointer::new())
    } else {
        g
    }
}

struct Runner {
    rt: tokio::runtime::Runtime,
    samples: usize,
    thread: u64,
}

impl Runner {
    fn measure(
        &mut self,
        workload: &str,
        mode: &str,
        graph: &CompiledGraph,
        units: u32,
        before_run: &dyn Fn(),
        input: &dyn Fn(usize) -> State,
    ) -> Result<(), BenchError> {
        // adk-graph's per-node cost grows with the graph: a 10,000-node run
        // takes 30 s or more, so it runs once, cold.
        let (first, samples) = if units >= 10_000 {
            (1, 1)
        } else {
            (0, self.samples)
        };
        for sample in first..=samples {
            self.thread += 1;
            before_run();
            // The per-run limit (default 50) wins over the compiled graph's.
            let config = ExecutionConfig::new(&format!("t{}", self.thread))
                .with_recursion_limit(units as usize + 10);
            let input = input(sample);
            let t0 = Instant::now();
            let out = self.rt.block_on(graph.invoke(input, config))?;
            let elapsed = t0.elapsed();
            if out.is_empty() {
                return Err(format!("{workload}: empty final state").into());
            }
            if sample > 0 {
                let per_unit = elapsed.as_secs_f64() * 1e6 / f64::from(units);
                println!("RESULT\t{workload}\tadk-graph\t{mode}\t{per_unit:.3}");
            }
        }
        Ok(())
    }
}

fn counter(n: i64) -> State {
    let mut s = State::new();
    s.insert("n".to_string(), Value::from(n));
    s
}

fn main() -> Result<(), BenchError> {
    let mut samples = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--samples" => samples = args.next().ok_or("--samples needs a value")?.parse()?,
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
    let nothing = || {};
    let zero = |_| counter(0);

    for (mode, memory) in [("none", false), ("memory", true)] {
        for n in [100u32, 1_000, 10_000] {
            let g = finish(chain(n).compile()?, n, memory);
            r.measure(&format!("a_chain_{n}"), mode, &g, n, &nothing, &zero)?;
        }

        let g = finish(fan_out(1_000).compile()?, 1_000, memory);
        r.measure("b_fanout_1000", mode, &g, 1_000, &nothing, &zero)?;

        let policies = NodeDefaults::new()
            .with_retry(RetryPolicy::new(3))
            .with_timeout(TimeoutPolicy {
                run_timeout: Some(Duration::from_secs(30)),
                ..TimeoutPolicy::default()
            });
        let g = finish(chain(1_000).compile()?, 1_000, memory).with_node_defaults(policies);
        r.measure("c_policies_1000", mode, &g, 1_000, &nothing, &zero)?;

        let failed: Arc<Mutex<HashSet<String>>> = Arc::default();
        let zero_backoff = RetryPolicy::new(3)
            .with_initial_delay(Duration::ZERO)
            .with_max_delay(Duration::ZERO)
            .with_jitter(0.0);
        let g = finish(flaky_chain(1_000, failed.clone()).compile()?, 1_000, memory)
            .with_node_defaults(NodeDefaults::new().with_retry(zero_backoff));
        let reset = move || {
            if let Ok(mut f) = failed.lock() {
                f.clear();
            }
        };
        r.measure("d_retry_once_1000", mode, &g, 1_000, &reset, &zero)?;

        let agent = cached_chain(100, memory)?;
        let base = i64::from(std::process::id()) * 1_000;
        let miss = move |s: usize| counter(base + s as i64);
        r.measure(
            "e_cache_miss_100",
            mode,
            agent.graph(),
            100,
            &nothing,
            &miss,
        )?;
        r.measure(
            "e_cache_hit_100",
            mode,
            agent.graph(),
            100,
            &nothing,
            &|_| counter(-1),
        )?;
        // The uncached chain a hit must beat.
        let g = finish(chain(100).compile()?, 100, memory);
        r.measure("e_no_cache_100", mode, &g, 100, &nothing, &zero)?;

        // (f): hits with 100 and 10,000 entries held (one per node per
        // distinct input stored before the timed runs).
        for entries in [100u32, 10_000] {
            let agent = cached_chain(100, memory)?;
            for fill in 0..entries / 100 {
                r.thread += 1;
                let config = ExecutionConfig::new(&format!("t{}", r.thread))
                    .with_recursion_limit(110);
                let input = counter(i64::from(fill) - 1_000_000);
                r.rt.block_on(agent.graph().invoke(input, config))?;
            }
            let last = i64::from(entries / 100) - 1 - 1_000_000;
            r.measure(
                &format!("f_cache_hit_{entries}_entries"),
                mode,
                agent.graph(),
                100,
                &nothing,
                &move |_| counter(last),
            )?;
        }
    }
    Ok(())
}
