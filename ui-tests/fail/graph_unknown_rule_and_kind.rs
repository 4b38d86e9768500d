//! A `graph!` mistake (unknown rule and kind): the .stderr beside this file is its error.
use aegis::prelude::*;

fn main() {
    let _ = graph! {
        schema { a: LastWrites, b: Apend = [], c: Sum requird }
        nodes { x = paladn(1), y = node(2, 3) }
        edges { START -> x -> END }
    };
}
