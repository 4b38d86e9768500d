//! A `graph!` mistake (a muster naming nodes the graph does not declare): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
async fn planner(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::muster(StateDelta::new(), "answer", Vec::<(String, serde_json::Value)>::new()))
}

#[aegis]
async fn answer(_: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let _ = ctx.task();
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { planner, worker answer }
        edges { START -> planner; answer -> END; }
        musters {
            planer -> answer,
            planner -> answr,
            START -> answer,
        }
    };
}
