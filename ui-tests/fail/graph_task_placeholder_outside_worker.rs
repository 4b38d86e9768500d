//! A `graph!` mistake (`{task.…}` in a node that never runs as a task): the
//! .stderr beside this file is its error.
use aegis::prelude::*;

fn main() {
    let _ = graph! {
        schema { answers: Append }
        nodes {
            answer = paladin(aegis::paladin::Paladin::new("A").with_model("m"), "{task.question}" -> answers),
        }
        edges { START -> answer -> END }
    };
}
