//! A `#[aegis]` mistake (not async): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(max = 3))]
fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
