//! A `#[aegis]` mistake (method with self): the .stderr beside this file is its error.
use aegis::prelude::*;

struct Booker;

impl Booker {
    #[aegis(retry(max = 3))]
    async fn book(&self, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

fn main() {}
