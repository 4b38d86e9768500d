//! A `#[aegis]` mistake (not a result): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> StateDelta {
    StateDelta::new()
}

fn main() {}
