//! A `graph!` mistake (default aegis on battalion and gate): the .stderr beside this file is its error.
use aegis::prelude::*;

fn child() -> WarGraph {
    WarGraph::new(BattlefieldSchema::default(), EngineLimits::default())
}

fn approval() -> NodeSpec {
    NodeSpec::gate("Ship?", "approve", "approve")
}

fn main() {
    let _ = graph! {
        nodes {
            sub = battalion(child()),
            approve = gate(approval()),
        }
        default_aegis { retry(max = 2), timeout(run = "30s") }
        edges { START -> sub -> approve -> END }
    };
}
