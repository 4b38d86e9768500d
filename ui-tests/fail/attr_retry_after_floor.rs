//! A `#[aegis]` mistake (the Retry-After floor's keys): the .stderr beside this file is its error.
use aegis::prelude::*;

// A cap with the floor off caps nothing.
#[aegis(retry(max_retry_after = "30s"))]
async fn capped_but_off(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(respect_retry_after = false, max_retry_after = "30s"))]
async fn capped_and_off(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

// A zero cap, a malformed one, a non-boolean switch.
#[aegis(retry(respect_retry_after = true, max_retry_after = "0s"))]
async fn zero_cap(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(respect_retry_after = "yes", max_retry_after = "1.5s"))]
async fn bad_values(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

// Unknown and repeated keys.
#[aegis(retry(respect_retry_afer = true, max_retry_after = "1s", max_retry_after = "2s"))]
async fn keys(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {}
