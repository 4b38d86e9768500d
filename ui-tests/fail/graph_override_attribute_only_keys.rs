//! A `graph!` mistake (override attribute only keys): the .stderr beside this file is its error.
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
        nodes {
            #[aegis(id = "other", crate = "::aegis", retry(max = 0))]
            book,
            #[serde(rename = "x")]
            cancel,
        }
        edges { START -> book -> END }
    };
}
