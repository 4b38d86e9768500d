//! A `graph!` mistake (worker route): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { item: LastWrite, score: Append, score_error: LastWrite }
        nodes {
            #[aegis(on_error(route = cancel))]
            worker score = paladin(aegis::paladin::Paladin::new("Scorer"), "Score {task.item}" -> score),
            cancel,
        }
        edges { START -> cancel -> END }
    };
}
