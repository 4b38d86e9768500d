//! A `graph!` mistake (function id not an identifier): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(id = "book-seat")]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book }
        edges { START -> book -> END }
    };
}
