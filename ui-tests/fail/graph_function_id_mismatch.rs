//! A `graph!` mistake (function id mismatch): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(id = "booker")]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book }
        edges { START -> book -> END }
    };
}
