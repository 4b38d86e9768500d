//! A `graph!` mistake (route target undeclared): the .stderr beside this file is its error.
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
        schema { book_error: LastWrite }
        nodes {
            #[aegis(on_error(route = cancle))]
            book,
            cancel,
        }
        edges { START -> book -> END }
    };
}
