//! graph!'s own mistakes and those of the attributes it reads are reported
//! together.
use aegis::prelude::*;

#[aegis(cache(ttl = "1m", key = fields(question)))]
async fn answer(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { answer: LastWrite }
        nodes { answer }
        edges { START -> answer -> reveiw -> END }
    };
}
