//! A node function named like a standard macro: one error, at its name; the
//! marker remains for the builder API and graph!.
use aegis::prelude::*;

#[aegis(retry(max = 2))]
async fn write(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let graph = graph! {
        nodes { write }
        edges { START -> write -> END }
    };
    let mut builder = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    builder.add_aegis_node(write {});
    let _ = graph;
}
