//! A `#[aegis]` mistake (cache without ttl): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(cache(key = fields(question)))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
