//! Every way a graph! node is reached without a static edge into it
//! compiles, and validates: a conditional edge, a route (in a function's
//! attribute, in a node's `#[aegis(..)]`, in `default_aegis`), a `dynamic`
//! mark, a muster of a worker template, and a Gate's targets.
#![deny(warnings)]

use aegis::prelude::*;

mod nodes {
    use aegis::prelude::*;

    #[aegis(on_error(route = refund, error_field = failure))]
    pub async fn charge(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    #[aegis]
    pub async fn refund(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

#[aegis]
async fn step(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn picked(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn jumped_to(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn rescue(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn fallback(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn split(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::muster(StateDelta::new(), "score", Vec::new()))
}

#[aegis]
async fn score(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn ship() -> NodeSpec {
    NodeSpec::from_fn("ship", |_, _| Box::pin(async { Ok(StateDelta::new().into()) }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Routes in attributes, in graph! and in default_aegis; a conditional
    // edge; a dynamic mark; a muster.
    let graph = graph! {
        schema { failure: LastWrite }
        nodes {
            nodes::charge,
            nodes::refund,
            #[aegis(on_error(route = rescue, error_field = failure))]
            step,
            rescue,
            fallback,
            picked,
            jumped_to,
            split,
            // Out of default_aegis: a mustered task cannot be routed.
            #[aegis]
            worker score,
        }
        default_aegis { on_error(route = fallback, error_field = failure) }
        edges {
            START -> charge -> step -> split -> END;
            step ?> "pick" -> [picked, END];
            refund -> END;
            rescue -> END;
            fallback -> END;
            picked -> END;
            jumped_to -> END;
            score -> END;
        }
        dynamic { jumped_to }
        musters { split -> score }
    };
    graph.validate()?;

    // A Gate's targets are in its NodeSpec, which graph! cannot read.
    let gated = graph! {
        nodes {
            approval = gate(NodeSpec::gate("Ship?", "yes", "no")),
            yes = node(ship()),
            no = node(ship()),
        }
        edges {
            START -> approval;
            yes -> END;
            no -> END;
        }
    };
    gated.validate()?;
    Ok(())
}
