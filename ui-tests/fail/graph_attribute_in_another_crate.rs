//! A function from another crate: the error is at the node graph! names (an
//! error in the other crate's file would not say which graph! is wrong), and
//! its message names the attribute's token.
use aegis::prelude::*;

fn main() {
    let _ = graph! {
        schema { charge_error: LastWrite }
        nodes { aegis_ui_nodes::charge }
        edges { START -> charge -> END }
    };
}
