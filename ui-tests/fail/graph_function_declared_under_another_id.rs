//! A `graph!` mistake (function declared under another id): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { booker = book }
        edges { START -> booker -> END }
    };
}
