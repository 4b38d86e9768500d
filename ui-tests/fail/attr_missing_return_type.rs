use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) {}

fn main() {}
