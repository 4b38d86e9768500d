//! A `graph!` mistake (an unknown cache scope in `default_aegis` and in a node's override): the .stderr beside this file is its error.
use aegis::prelude::*;

fn main() {
    let _graph = graph! {
        schema { question: LastWrite, answer: LastWrite }
        nodes {
            #[aegis(cache(ttl = "1m", scope = tenant))]
            writer = paladin(aegis::paladin::Paladin::new("Writer").with_model("gpt-4o"), "Draft: {question}" -> answer),
        }
        default_aegis { cache(ttl = "5m", scope = Node) }
        edges { START -> writer -> END }
    };
}
