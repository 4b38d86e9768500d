//! A `graph!` mistake followed by more code: the error alone, with no
//! "unreachable statement" warning on the code after it, and no type error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let graph = graph! {
        nodes { book }
        edges { START -> book -> ENDD }
    };
    let fingerprint = graph.fingerprint();
    println!("{fingerprint}");
}
