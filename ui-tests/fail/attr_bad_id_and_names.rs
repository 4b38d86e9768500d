//! A `#[aegis]` mistake (bad id and names): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(id = "", on_error(route = "cancel"), cache(ttl = "1m", key = fields("q")))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(id = "book-v2", on_error(route = cancel))]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
