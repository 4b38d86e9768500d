//! A `#[aegis]` mistake (generic): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book<T: Default>(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = T::default();
    Ok(StateDelta::new())
}

fn main() {}
