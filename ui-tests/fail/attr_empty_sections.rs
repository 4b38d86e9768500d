//! A `#[aegis]` mistake (empty sections): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(), on_error())]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
