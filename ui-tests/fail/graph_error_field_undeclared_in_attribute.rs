//! A `graph!` mistake (error field undeclared in attribute): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(route = cancel, error_field = booking_eror))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { booking_error: LastWrite }
        nodes { book, cancel }
        edges { START -> book -> END }
    };
}
