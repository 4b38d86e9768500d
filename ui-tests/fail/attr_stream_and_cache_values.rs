//! A `#[aegis]` mistake (a zero first-chunk deadline, a fallback-caching flag that is no bool): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(timeout(first_chunk = "0s"), cache(ttl = "1m", fallback_results = "yes"))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
