//! A `graph!` mistake (route to worker template in attribute): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(on_error(route = score))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { item: LastWrite, score: Append, book_error: LastWrite }
        nodes {
            book,
            worker score = paladin(aegis::paladin::Paladin::new("Scorer").with_model("m"), "Score {task.item}" -> score),
        }
        edges { START -> book -> END }
    };
}
