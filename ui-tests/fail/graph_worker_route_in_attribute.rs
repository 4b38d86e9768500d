//! A `graph!` mistake (worker route in attribute): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(route = cancel))]
async fn score(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { score_error: LastWrite }
        nodes { worker score, cancel }
        edges { START -> cancel -> END }
    };
}
