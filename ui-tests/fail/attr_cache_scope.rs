//! A `#[aegis]` mistake (an unknown cache scope, a scope in quotes): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(cache(ttl = "15m", scope = nodes))]
async fn answer(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "15m", scope = "node"))]
async fn summarise(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
