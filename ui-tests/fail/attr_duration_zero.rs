//! A `#[aegis]` mistake (duration zero): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(run = "0s"), cache(ttl = "0m"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
