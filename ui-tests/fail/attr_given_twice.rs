//! A `#[aegis]` mistake (given twice): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(max = 3))]
#[aegis(timeout(run = "10s"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
