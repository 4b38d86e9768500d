//! A `#[aegis]` mistake (duplicate key): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(max = 2, max = 3), timeout(run = "1s"), timeout(idle = "1s"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
