//! A `graph!` mistake (a muster to a regular node, from a worker template, and one declared twice): the .stderr beside this file is its error.
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

#[aegis]
async fn summarize(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        nodes { planner, worker answer, summarize }
        edges { START -> planner; answer -> summarize -> END; }
        musters {
            planner -> answer,
            planner -> summarize,
            answer -> answer,
            planner -> answer,
        }
    };
}
