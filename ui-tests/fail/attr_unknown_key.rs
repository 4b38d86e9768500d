//! A `#[aegis]` mistake (unknown key): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(retyr(max = 3), timeout(idel = "1s"), retry(on = transiet))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(bogus = 1)]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
