//! A `#[aegis]` mistake (unconvertible error): the .stderr beside this file is its error.
use aegis::prelude::*;

struct MyError;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, MyError> {
    Err(MyError)
}

fn main() {}
