//! A builder mistake (a function with a dependency added without it, or
//! one without given one): the .stderr beside this file is its error.
use aegis::prelude::*;
use std::rc::Rc;

struct Researcher;

#[aegis]
async fn answer(_: &Researcher, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn not_shareable(_: &Rc<String>, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let mut graph = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    graph.add_aegis_node(answer {});
    graph.add_aegis_node(book::with(Researcher));
    graph.add_aegis_node(answer::with(String::new()));
}
