//! A `#[aegis]` mistake (initial above max interval): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retry(initial = "2m", max_interval = "1m"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(initial = "90s"))]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
