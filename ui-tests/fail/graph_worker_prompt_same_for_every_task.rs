//! A `graph!` mistake (a worker template whose prompt cannot vary per task):
//! the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn plan(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { topic: LastWrite, answers: Append }
        nodes {
            plan,
            worker answer = paladin(aegis::paladin::Paladin::new("A").with_model("m"), "Answer about {topic}" -> answers),
        }
        edges { START -> plan -> END; answer -> END }
    };
}
