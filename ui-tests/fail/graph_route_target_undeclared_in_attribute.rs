//! A `graph!` mistake (route target undeclared in attribute): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(max = 5), timeout(idle = "10s"), on_error(route = cancel))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { book_error: LastWrite }
        nodes { book }
        edges { START -> book -> END }
    };
}
