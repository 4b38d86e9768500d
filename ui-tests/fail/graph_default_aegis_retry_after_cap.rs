//! A `graph!` mistake (default aegis caps a Retry-After floor that is off): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book }
        default_aegis { retry(max = 3, max_retry_after = "1m") }
        edges { START -> book -> END }
    };
}
