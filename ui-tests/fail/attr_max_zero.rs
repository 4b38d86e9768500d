//! A `#[aegis]` mistake (max zero): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(max = 0))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
