//! A `graph!` mistake (error field sum): the .stderr beside this file is its error.
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
        schema { failures: Sum = 0 }
        nodes {
            #[aegis(on_error(route = cancel, error_field = failures))]
            book,
            cancel,
        }
        edges { START -> book -> END }
    };
}
