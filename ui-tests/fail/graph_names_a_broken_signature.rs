//! A mistake in an #[aegis] function's signature is one error, at its token,
//! even where graph! and the builder API name it; the function stays
//! callable as written.
use aegis::prelude::*;

#[aegis(on_error(route = cancel))]
fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let graph = graph! {
        nodes { book, cancel }
        edges { START -> book -> END; cancel -> END; }
    };
    let mut builder = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    builder.add_aegis_node(book {});
    let called = book(&Battlefield::new(), &NodeContext::detached("book"));
    let _ = (graph, called);
}
