//! A function without `#[aegis]` in a graph! nested in another's (a
//! Battalion's child, declared in place): reported at its path, as in any
//! graph!, though both graphs name their first node's descriptor alike.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

async fn refund(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes {
            book,
            sub = battalion(graph! {
                nodes { refund }
                edges { START -> refund -> END }
            }),
        }
        edges { START -> book -> sub -> END }
    };
}
