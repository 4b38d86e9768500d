use aegis::prelude::*;

#[aegis(timeout(run = "0s"), cache(ttl = "0m"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
