//! A `#[aegis]` mistake (duration fractional): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(run = "1.5s"), cache(ttl = "0.5h"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
