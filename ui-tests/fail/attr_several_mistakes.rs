//! A `#[aegis]` mistake (several mistakes): the .stderr beside this file is its error.
use aegis::prelude::*;

// Every mistake in one attribute is reported in one build.
#[aegis(
    retry(max = 0, factor = 0.5, jiter = true),
    timeout(run = "0s", idle = "1.5s"),
    on_error(route = cancel, custom = "x"),
    cache(key = default),
    retyr
)]
fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
