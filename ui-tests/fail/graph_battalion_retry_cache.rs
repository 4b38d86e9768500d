//! A `graph!` mistake (battalion retry cache): the .stderr beside this file is its error.
use aegis::prelude::*;

fn child() -> WarGraph {
    WarGraph::new(BattlefieldSchema::default(), EngineLimits::default())
}

fn main() {
    let _ = graph! {
        schema { request: LastWrite, result: LastWrite }
        nodes {
            #[aegis(retry(max = 3), timeout(run = "1m"), cache(ttl = "5m"))]
            sub = battalion(child(), inputs(request -> input), outputs(output -> result)),
        }
        edges { START -> sub -> END }
    };
}
