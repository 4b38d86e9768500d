//! `scope = node | graph` in `cache(..)`: on an `#[aegis]` function, in
//! `graph!`'s per-node overrides and in its `default_aegis`, and the code
//! digest the attribute gives every function.
#![deny(warnings)]

use aegis::prelude::*;
use aegis::graph::{AegisDepsFn, AegisNodeFn};
use aegis::paladin::Paladin;
use aegis::policy::CacheScope;

#[aegis(cache(ttl = "15m", scope = node))]
async fn answer(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(cache(ttl = "15m", key = fields(question), scope = graph, fallback_results = true))]
async fn summarise(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

struct Client;

#[aegis(cache(ttl = "1h", scope = node))]
async fn lookup(_: &Client, _: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let scope_of = |graph: &WarGraph, id: &str| {
        graph
            .aegis_for(&NodeId::new(id))
            .and_then(|a| a.cache.as_ref())
            .map(|c| c.scope)
    };
    let graph = graph! {
        schema { question: LastWrite, answer: LastWrite, summary: LastWrite }
        nodes {
            answer,
            summarise,
            lookup(Client),
            #[aegis(cache(ttl = "1m", scope = node))]
            writer = paladin(Paladin::new("Writer").with_model("gpt-4o"), "Draft: {question}" -> summary),
        }
        default_aegis { cache(ttl = "5m", scope = node) }
        edges { START -> answer -> summarise -> lookup -> writer -> END }
    };
    assert_eq!(scope_of(&graph, "answer"), Some(CacheScope::Node));
    assert_eq!(scope_of(&graph, "summarise"), Some(CacheScope::Graph));
    assert_eq!(scope_of(&graph, "lookup"), Some(CacheScope::Node));
    assert_eq!(scope_of(&graph, "writer"), Some(CacheScope::Node));
    assert_eq!(
        graph.default_aegis().and_then(|a| a.cache.as_ref()).map(|c| c.scope),
        Some(CacheScope::Node)
    );
    // Every #[aegis] function carries its code digest: 32 hex digits.
    for digest in [<answer as AegisNodeFn>::CODE_VERSION, <lookup as AegisDepsFn>::CODE_VERSION] {
        assert_eq!(digest.map(str::len), Some(32));
    }
    assert_ne!(<answer as AegisNodeFn>::CODE_VERSION, <summarise as AegisNodeFn>::CODE_VERSION);
}
