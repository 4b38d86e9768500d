//! A `graph!` mistake (default aegis route without error field): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book, cancel }
        default_aegis { on_error(route = cancel), id = "x" }
        edges { START -> book -> END }
    };
}
