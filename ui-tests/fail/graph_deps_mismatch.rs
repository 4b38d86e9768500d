//! A `graph!` mistake (a dependency missing, or given to a function taking
//! none): the .stderr beside this file is its error.
use aegis::prelude::*;
use std::sync::Arc;

struct Researcher;

#[aegis]
async fn answer(_: &Researcher, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let researcher = Arc::new(Researcher);
    let _ = graph! {
        nodes { answer, book(researcher.clone()) }
        edges { START -> answer -> book -> END }
    };
}
