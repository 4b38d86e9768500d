//! A `#[aegis]` mistake (factor below one): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(factor = 0.5))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
