//! A `#[aegis]` mistake (empty custom name): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(on = ""), on_error(custom = ""))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
