//! A `#[aegis]` mistake (error field without route): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(custom = "escalate", error_field = booking_error))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(error_field = booking_error))]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
