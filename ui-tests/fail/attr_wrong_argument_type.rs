use aegis::prelude::*;

#[aegis]
async fn book(state: &String, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = state;
    Ok(StateDelta::new())
}

fn main() {}
