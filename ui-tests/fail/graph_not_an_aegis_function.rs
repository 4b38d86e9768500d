//! A `graph!` mistake (not an aegis function): the .stderr beside this file is its error.
use aegis::prelude::*;

async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book }
        edges { START -> book -> END }
    };
}
