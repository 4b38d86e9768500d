//! A `graph!` mistake (error field undeclared): the .stderr beside this file is its error.
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
        schema { booking: LastWrite }
        nodes {
            #[aegis(on_error(route = cancel, error_field = booking_eror))]
            book,
            #[aegis(on_error(route = book))]
            cancel,
        }
        edges { START -> book -> END }
    };
}
