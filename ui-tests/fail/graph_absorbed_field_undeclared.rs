//! A `graph!` mistake (absorbed field undeclared): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(absorb(summary = "unavailable")))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { booking: LastWrite }
        nodes { book }
        edges { START -> book -> END }
    };
}
