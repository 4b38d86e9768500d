//! Every form of the #[aegis(..)] grammar compiles without a warning.
#![deny(warnings)]

use aegis::prelude::*;
use aegis::graph::AegisNodeFn;

// The design card's example, exactly as written.
#[aegis(retry(max = 5), timeout(idle = "10s"), on_error(route = cancel))]
async fn book(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    ctx.heartbeat();
    let _ = state;
    Ok(StateDelta::new())
}

#[aegis(retry(max = 4, initial = "250ms", factor = 3.0, max_interval = "1m30s", jitter = false, on = transient))]
async fn every_retry_key(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::end(StateDelta::new()))
}

#[aegis(retry, timeout(run = "120s"))]
async fn bare_retry(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = unknown, factor = 2, jitter))]
async fn on_unknown(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = all), on_error(route = cancel, error_field = booking_error))]
async fn on_all(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = never, initial = "0ms"), on_error(absorb(summary = "unavailable", retries_left = 0, score = -0.5, tags = ["a", 1, null], ok = false)))]
async fn on_never(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(retry(on = "rate-limit-only"), on_error(absorb))]
async fn on_custom(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(custom = "escalate"), cache(ttl = "15m", key = fields(question, locale)))]
async fn custom_handler(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "1h", key = default), timeout(run = "1h2m3s4ms", idle = "500ms"))]
async fn cache_default(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(timeout(run = "2m", idle = "10s", first_chunk = "5s"), cache(ttl = "1m", fallback_results = true))]
async fn streamed(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(id = "booker", crate = "::aegis")]
async fn renamed(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

// Explicit lifetimes, a pub node in a module, `?` on a user error type.
mod nodes {
    use aegis::prelude::*;

    pub struct Declined;

    impl From<Declined> for StateNodeError {
        fn from(_: Declined) -> Self {
            StateNodeError::permanent("declined")
        }
    }

    /// A documented public node.
    #[aegis(timeout(run = "5s"))]
    pub async fn lifetimes<'a>(state: &'a Battlefield, _ctx: &'a NodeContext) -> Result<StateDelta, Declined> {
        state.get("x").map(|_| StateDelta::new()).ok_or(Declined)
    }
}

#[cfg(test)]
#[aegis]
async fn only_in_tests(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    assert_eq!(<book as AegisNodeFn>::aegis().retry.map(|r| r.max_attempts), Some(5));
    assert_eq!(<renamed as AegisNodeFn>::ID, "booker");
    let mut graph = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    graph
        .add_aegis_node(book {})
        .add_aegis_node(every_retry_key {})
        .add_aegis_node(bare_retry {})
        .add_aegis_node(on_unknown {})
        .add_aegis_node(on_all {})
        .add_aegis_node(on_never {})
        .add_aegis_node(on_custom {})
        .add_aegis_node(custom_handler {})
        .add_aegis_node(cache_default {})
        .add_aegis_node(renamed {})
        .add_aegis_node(cancel {})
        .add_aegis_node(nodes::lifetimes {});
    assert_eq!(graph.nodes().count(), 12);
    assert!(graph.aegis_for(&NodeId::new("cancel")).is_none());
}
