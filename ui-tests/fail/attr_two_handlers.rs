//! A `#[aegis]` mistake (two handlers): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(route = cancel, absorb(summary = "unavailable"), custom = "escalate"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
