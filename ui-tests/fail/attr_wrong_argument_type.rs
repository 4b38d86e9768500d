//! A `#[aegis]` mistake (wrong argument type): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(state: &String, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = state;
    Ok(StateDelta::new())
}

fn main() {}
