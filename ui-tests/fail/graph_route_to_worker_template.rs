//! A `graph!` mistake (route to worker template): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { item: LastWrite, score: Append, book_error: LastWrite }
        nodes {
            #[aegis(on_error(route = score))]
            book,
            worker score = paladin(aegis::paladin::Paladin::new("Scorer"), "Score {task.item}" -> score),
        }
        edges { START -> book -> END }
    };
}
