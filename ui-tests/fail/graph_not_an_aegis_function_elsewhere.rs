//! Functions without `#[aegis]` in another module, under another id and in
//! another crate:
//! each is reported at its path, naming the function.
use aegis::prelude::*;

mod nodes {
    use aegis::prelude::*;

    pub async fn charge(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    pub async fn refund(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book, nodes::charge, undo = nodes::refund, aegis_ui_nodes::plain }
        edges { START -> book -> charge -> undo -> plain -> END }
    };
}
