//! A `#[aegis]` mistake (wrong success type): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<String, StateNodeError> {
    Ok(String::new())
}

fn main() {}
