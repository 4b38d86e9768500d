//! Superstep cost grows with the delta, not the state: a long run appending
//! one item per superstep allocates linearly (counted by a global allocator,
//! not timed), and unchanged fields are shared between snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

mod support;

use aegis::graph::EngineLimits;
use aegis::graph::NodeSpec;
use aegis::prelude::*;
use aegis::waypoint::Activation;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use support::fixtures::*;

struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates every call to the system allocator unchanged; it only
// counts the bytes requested.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A graph whose one node appends an item and loops until `steps` items.
fn looping(steps: u64) -> WarGraph {
    let node = NodeSpec::from_fn("append_one", move |state, _| {
        let len = state.list_len("log").unwrap_or(0) as u64;
        Box::pin(async move {
            let d = delta(&[("log", json!({"step": len})), ("steps", json!(1))]);
            Ok(if len + 1 < steps {
                Directive::goto(d, "step")
            } else {
                Directive::end(d)
            })
        })
    });
    let mut g = WarGraph::new(
        schema(&[
            ("log", DispatchRule::Append),
            ("steps", DispatchRule::Sum),
            ("big", DispatchRule::LastWrite),
        ]),
        EngineLimits::default()
            .with_max_supersteps(20_000)
            .with_max_node_visits(20_000),
    );
    g.add_node("step", node)
        .add_edge(START, "step")
        .add_edge("step", END)
        .mark_dynamic_target("step");
    g
}

async fn bytes_for(steps: u64, input: serde_json::Value) -> u64 {
    let g = looping(steps);
    let e = engine();
    let before = ALLOCATED.load(Ordering::Relaxed);
    let out = e.start(&g, "t", input).await.unwrap();
    let used = ALLOCATED.load(Ordering::Relaxed) - before;
    let state = out.into_result().unwrap();
    assert_eq!(state.list_len("log"), Some(steps as usize));
    assert_eq!(state.get("steps"), Some(&json!(steps)));
    used
}

#[tokio::test]
async fn a_long_appending_run_allocates_linearly_and_ignores_unrelated_state() {
    let small = bytes_for(1_000, json!({})).await;
    let large = bytes_for(10_000, json!({})).await;
    // Linear work is ~10x; copying the list every superstep would be ~100x.
    let ratio = large as f64 / small as f64;
    eprintln!("1,000 supersteps: {small} bytes; 10,000: {large} bytes ({ratio:.2}x)");
    assert!(
        ratio < 14.0,
        "10x the supersteps cost {ratio:.1}x the bytes ({small} -> {large})"
    );

    // A 10 MB field nobody writes is shared, not copied, by every snapshot.
    let blob = "x".repeat(10 * 1024 * 1024);
    let with_blob = bytes_for(10_000, json!({ "big": blob })).await;
    let extra = with_blob.saturating_sub(large);
    // The input itself is parsed and stored once (a few copies of 10 MB);
    // 10,000 snapshots copying it would be 100 GB.
    assert!(
        extra < 64 * 1024 * 1024,
        "unrelated 10 MB field cost {extra} extra bytes"
    );
}

#[tokio::test]
async fn every_waypoint_shares_the_fields_its_superstep_did_not_write() {
    let g = looping(50);
    let e = engine();
    run_to_state(&e, &g, "t", json!({"big": "unchanged"})).await;
    let history = e.store().history("t").await.unwrap();
    assert_eq!(history.len(), 51);
    for pair in history.windows(2) {
        assert!(pair[1].state.shares_field_with(&pair[0].state, "big"));
        assert!(!pair[1].state.shares_field_with(&pair[0].state, "log"));
    }
}

#[tokio::test]
async fn a_chain_shares_each_next_vanguard_from_the_graph_instead_of_building_one() {
    let g = chain(
        schema(&[("n", DispatchRule::Sum)]),
        vec![("a", write("n", json!(1))), ("b", write("n", json!(1)))],
    );
    let e = engine();
    run_to_state(&e, &g, "t1", json!({})).await;
    run_to_state(&e, &g, "t2", json!({})).await;
    let (h1, h2) = (
        e.store().history("t1").await.unwrap(),
        e.store().history("t2").await.unwrap(),
    );
    // Superstep 1 ran `a`; its waypoint's vanguard is `[b]`.
    let (w1, w2) = (&h1[1], &h2[1]);
    assert_eq!(&w1.vanguard[..], &[Activation::node("b")]);
    assert_eq!(w1.vanguard, w2.vanguard);
    // One allocation for every thread: the index's, not one per superstep.
    assert!(std::sync::Arc::ptr_eq(&w1.vanguard, &w2.vanguard));
}
