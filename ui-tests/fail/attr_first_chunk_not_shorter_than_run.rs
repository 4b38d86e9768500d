//! A `#[aegis]` mistake (a first-chunk deadline the run timeout always beats): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(run = "5s", first_chunk = "5s"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(timeout(run = "1m", first_chunk = "90s", idle = "10s"))]
async fn answer(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
