//! A `#[aegis]` mistake (duration not a string): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(run = 10))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
