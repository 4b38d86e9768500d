//! A `#[aegis]` mistake (wrong argument list): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(state: Battlefield, ctx: &mut NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = (state, ctx);
    Ok(StateDelta::new())
}

fn main() {}
