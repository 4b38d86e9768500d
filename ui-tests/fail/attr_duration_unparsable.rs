//! A `#[aegis]` mistake (duration unparsable): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(run = "10 sec", idle = "30s1m"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
