//! A `#[aegis]` mistake (missing return type): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) {}

fn main() {}
