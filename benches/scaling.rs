//! Superstep cost grows with the delta, not the state: a 10,000-superstep
//! run appending one item per superstep, without and with a 10 MB field in
//! state that no node writes. Reports the time per superstep and the peak
//! RSS (`VmHWM` from `/proc/self/status`) of each case.
//!
//! Each case runs in a child process of its own (this binary, re-executed),
//! so that one case's peak cannot hide the other's.
//!
//! `cargo bench --bench scaling`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Instant;

const STEPS: u64 = 10_000;
const RUNS: usize = 5;
const CASE_VAR: &str = "AEGIS_SCALING_CASE";

/// One node that appends an item and loops until `STEPS` items.
fn looping() -> WarGraph {
    let node = NodeSpec::from_fn("append_one", |state, _| {
        let len = state.list_len("log").unwrap_or(0) as u64;
        Box::pin(async move {
            let mut d = StateDelta::new();
            d.set("log", json!({ "step": len }))?.set("steps", 1)?;
            Ok(if len + 1 < STEPS {
                Directive::goto(d, "step")
            } else {
                Directive::end(d)
            })
        })
    });
    let field = |name: &str, rule| FieldSpec::new(FieldName::new(name).unwrap(), rule, None, false);
    let schema = BattlefieldSchema::new(vec![
        field("log", DispatchRule::Append),
        field("steps", DispatchRule::Sum),
        field("big", DispatchRule::LastWrite),
    ]);
    let limits = EngineLimits::default()
        .with_max_supersteps(20_000)
        .with_max_node_visits(20_000);
    let mut g = WarGraph::new(schema, limits);
    g.add_node("step", node)
        .add_edge(START, "step")
        .add_edge("step", END)
        .mark_dynamic_target("step");
    g
}

fn status_kb(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child: runs one case `RUNS` times, prints
/// `<median µs per superstep> <peak RSS kB> <RSS kB before the first run>`.
fn run_case(blob: bool) {
    let input: Value = if blob {
        json!({ "big": "x".repeat(10 * 1024 * 1024) })
    } else {
        json!({})
    };
    let rss_before = status_kb("VmRSS:");
    let g = looping();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut per_step: Vec<f64> = (0..RUNS)
        .map(|_| {
            let engine = WarEngine::new(InMemoryWaypointStore::new());
            let t0 = Instant::now();
            let out = rt.block_on(engine.start(&g, "t", input.clone())).unwrap();
            let elapsed = t0.elapsed();
            let state = out.into_result().unwrap();
            assert_eq!(state.list_len("log"), Some(STEPS as usize));
            elapsed.as_secs_f64() * 1e6 / STEPS as f64
        })
        .collect();
    per_step.sort_by(f64::total_cmp);
    println!(
        "{:.3} {} {}",
        per_step[RUNS / 2],
        status_kb("VmHWM:"),
        rss_before
    );
}

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        return run_case(case == "blob");
    }
    let me = std::env::current_exe().unwrap();
    println!(
        "{STEPS} supersteps, one appended item each, in-memory waypoints (median of {RUNS} runs):"
    );
    for (case, label) in [
        ("plain", "no unrelated state"),
        ("blob", "plus a 10 MB unrelated field"),
    ] {
        let out = Command::new(&me).env(CASE_VAR, case).output().unwrap();
        assert!(out.status.success(), "{case} case failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text.split_whitespace();
        let (us, hwm, before) = (
            fields.next().unwrap_or("?"),
            fields.next().unwrap_or("?"),
            fields.next().unwrap_or("?"),
        );
        println!(
            "  {label:<30} {us:>8} µs per superstep, peak RSS {hwm:>7} kB \
             (RSS before the runs {before} kB)"
        );
    }
}
