use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> StateDelta {
    StateDelta::new()
}

fn main() {}
