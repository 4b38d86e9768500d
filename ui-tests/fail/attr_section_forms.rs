//! A `#[aegis]` mistake (section forms): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry = 3, timeout, cache(ttl), max = 2)]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
