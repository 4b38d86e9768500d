//! A `graph!` mistake (schema mistakes): the .stderr beside this file is its error.
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
        schema {
            booking: LastWrite,
            booking: Append,
            note: LastWrite = some_value(),
            flag: LastWrite cache = maybe,
        }
        nodes { book }
        edges { START -> book -> END }
    };
}
