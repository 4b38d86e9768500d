use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<String, StateNodeError> {
    Ok(String::new())
}

fn main() {}
