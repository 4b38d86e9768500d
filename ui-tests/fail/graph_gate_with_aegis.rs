use aegis::prelude::*;

fn approval() -> NodeSpec {
    unimplemented!()
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
