//! A user's own items named like the runtime's or like the macros'
//! locals change nothing in the generated code.
#![deny(warnings)]
#![allow(non_upper_case_globals, dead_code, non_camel_case_types, unused_macros)]

use aegis::prelude::{aegis, graph};

mod core {}
mod std {}
struct Aegis;
struct Option;
struct Box;
struct Vec;
struct Duration;
struct Value;
struct String;
type Result<T> = ::core::result::Result<T, ()>;
const state: u8 = 0;
const ctx: u8 = 1;
macro_rules! vec {
    ($($t:tt)*) => {
        compile_error!("the user's vec! was called")
    };
}
macro_rules! concat {
    ($($t:tt)*) => {
        compile_error!("the user's concat! was called")
    };
}
macro_rules! panic {
    ($($t:tt)*) => {
        compile_error!("the user's panic! was called")
    };
}

#[aegis(retry(max = 2), timeout(run = "1s"), on_error(absorb(note = "x", list = [1])), cache(ttl = "1m", key = fields(note)))]
async fn node_a(
    _s: &aegis::state::Battlefield,
    _c: &aegis::graph::NodeContext,
) -> ::core::result::Result<aegis::state::StateDelta, aegis::error::StateNodeError> {
    Ok(aegis::state::StateDelta::new())
}

#[aegis(on_error(route = node_a, error_field = note))]
async fn node_b(
    _s: &aegis::state::Battlefield,
    _c: &aegis::graph::NodeContext,
) -> ::core::result::Result<aegis::state::StateDelta, aegis::error::StateNodeError> {
    Ok(aegis::state::StateDelta::new())
}

// A crate that re-exports aegis points the macros at its own path, as
// serde's `crate = ".."` does.
mod reexport {
    pub use ::aegis::*;
}

#[aegis(crate = "crate::reexport", retry(max = 2))]
async fn through_reexport(
    _s: &aegis::state::Battlefield,
    _c: &aegis::graph::NodeContext,
) -> ::core::result::Result<aegis::state::StateDelta, aegis::error::StateNodeError> {
    Ok(aegis::state::StateDelta::new())
}

fn main() {
    let reexported = graph! {
        crate = "crate::reexport";
        nodes { through_reexport }
        edges { START -> through_reexport -> END }
    };
    assert_eq!(reexported.nodes().count(), 1);

    let graph = 5u8;
    let __aegis_graph = 6u8;
    let built = graph! {
        limits = { let _ = (graph, __aegis_graph); aegis::graph::EngineLimits::default() };
        schema {
            note: LastWrite = "n",
            list: Append = [1, 2],
        }
        nodes { node_a, node_b }
        default_aegis { timeout(idle = "2s") }
        edges { START -> node_a -> node_b -> END }
    };
    let _: Result<u8> = Ok(graph + __aegis_graph);
    assert_eq!(built.nodes().count(), 2);
}
