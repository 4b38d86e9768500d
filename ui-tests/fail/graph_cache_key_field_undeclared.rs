//! A `graph!` mistake (cache key field undeclared): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis(cache(ttl = "15m", key = fields(question, locale)))]
async fn answer(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { question: LastWrite }
        nodes { answer }
        edges { START -> answer -> END }
    };
    let _ = graph! {
        schema { question: LastWrite }
        nodes {
            #[aegis(cache(ttl = "1m", key = fields(qestion)))]
            answer,
        }
        edges { START -> answer -> END }
    };
}
