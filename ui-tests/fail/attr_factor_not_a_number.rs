//! A `#[aegis]` mistake (factor not a number): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(factor = "2"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
