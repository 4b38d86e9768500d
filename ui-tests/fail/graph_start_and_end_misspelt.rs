//! START and END misspelt: the error suggests them, whatever the case, where
//! the edge can take them; a declared node still wins when it is closer.
use aegis::prelude::*;

#[aegis]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { book, cancel }
        edges {
            START -> book;
            STRAT -> cancel -> ENDD;
            book ?> "pick" -> [cancel, end];
            Start -> canel -> End;
        }
    };
}
