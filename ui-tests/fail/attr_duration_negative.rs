//! A `#[aegis]` mistake (duration negative): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(idle = "-5s"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
