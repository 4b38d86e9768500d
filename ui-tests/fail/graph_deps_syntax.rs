//! A `graph!` mistake (an empty or doubled instance): the .stderr beside this file is its error.
use aegis::prelude::*;

struct Researcher;

#[aegis]
async fn answer(_: &Researcher, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { answer(), again = answer(Researcher, Researcher) }
        edges { START -> answer -> again -> END }
    };
}
