//! A node path that names nothing (here a function not imported) is
//! rustc's unresolved import, and only that: not "has no #[aegis]".
use aegis::prelude::*;

mod nodes {
    use aegis::prelude::*;

    #[aegis]
    pub async fn charge(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

fn main() {
    let _ = graph! {
        nodes { charge }
        edges { START -> charge -> END }
    };
}
