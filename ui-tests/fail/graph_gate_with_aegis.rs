//! A `graph!` mistake (gate with aegis): the .stderr beside this file is its error.
use aegis::prelude::*;

fn approval() -> NodeSpec {
    NodeSpec::gate("Ship?", "approve", "approve")
}

fn main() {
    let _ = graph! {
        nodes {
            #[aegis(timeout(run = "1h"), on_error(custom = "escalate"))]
            approve = gate(approval()),
        }
        edges { START -> approve -> END }
    };
}
