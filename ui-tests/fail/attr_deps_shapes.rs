//! A `#[aegis]` mistake (a dependency the node could not own and lend): the .stderr beside this file is its error.
use aegis::prelude::*;

struct Client<'a>(&'a str);

#[aegis]
async fn by_value(c: String, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = c;
    Ok(StateDelta::new())
}

#[aegis]
async fn mutable(c: &mut String, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = c;
    Ok(StateDelta::new())
}

#[aegis]
async fn opaque(c: &impl Send, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = c;
    Ok(StateDelta::new())
}

#[aegis]
async fn borrowing<'a>(c: &Client<'a>, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = c.0;
    Ok(StateDelta::new())
}

#[aegis]
async fn four(a: &String, b: &String, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = (a, b);
    Ok(StateDelta::new())
}

#[aegis]
async fn deps_second(_: &Battlefield, c: &String, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = c;
    Ok(StateDelta::new())
}

fn main() {
    // The markers still exist: naming them adds no error of its own.
    let mut graph = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    graph
        .add_aegis_node(by_value::with(String::new()))
        .add_aegis_node(mutable::with(1));
    let _ = graph! {
        nodes { opaque(1), borrowing(Client("x")) }
        edges { START -> opaque -> borrowing -> END }
    };
}
