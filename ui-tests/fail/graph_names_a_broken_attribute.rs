//! A mistake in an #[aegis] attribute is one error, at its token: the
//! function's node marker and descriptor are still there, so graph! and the
//! builder API naming it add no error of their own.
use aegis::prelude::*;

#[aegis(retry(max = 0), on_error(route = nowhere))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let graph = graph! {
        nodes { book }
        edges { START -> book -> END }
    };
    let mut builder = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    builder.add_aegis_node(book {});
    let _ = (graph, <book as aegis::graph::AegisNodeFn>::ID);
}
