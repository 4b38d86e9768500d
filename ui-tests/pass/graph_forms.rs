//! Every form of the graph! grammar that today's runtime supports compiles
//! without a warning, and builds what it says.
#![deny(warnings)]

use aegis::prelude::*;
use aegis::graph::StateNode;
use aegis::paladin::Paladin;

mod nodes {
    use aegis::prelude::*;

    #[aegis(retry(max = 3), on_error(route = cancel))]
    pub async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    #[aegis(id = "summariser", cache(ttl = "10m", key = fields(question)))]
    pub async fn summarise(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    #[aegis(on_error(absorb(total = 0)))]
    pub async fn tally(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

struct Noop;

#[async_trait]
impl StateNode for Noop {
    fn kind_name(&self) -> &str {
        "noop"
    }

    async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
        Ok(StateDelta::new().into())
    }
}

fn main() {
    let graph = graph! {
        crate = "::aegis";
        limits = EngineLimits::default().with_max_supersteps(20);
        schema {
            question: LastWrite required,
            book_error: LastWrite,
            draft: LastWrite = "none",
            log: Append = [] cache = deny,
            total: Sum = 0 cache = allow,
            meta: Merge = { "k": [1, -2, 3.5, true, null], other: {} },
        }
        nodes {
            nodes::book,
            cancel,
            summariser = nodes::summarise,
            nodes::tally,
            #[aegis(retry(max = 2), timeout(idle = "5s"), on_error(absorb(draft = "n/a")))]
            writer = paladin(Paladin::new("Writer").with_model("gpt-4o"), "Draft a reply to: {question} {{literal}}" -> draft),
            #[aegis]
            noop = node(NodeSpec::function(Noop)),
            #[aegis(on_error(route = cancel, error_field = book_error), cache(ttl = "1m"))]
            reviewer = paladin(Paladin::new("Reviewer").with_model("gpt-4o"), "Review: {draft}" -> draft),
        }
        default_aegis { retry(max = 2), timeout(run = "30s", first_chunk = "5s") }
        edges {
            START -> book -> [writer, tally] -> summariser;
            summariser -> reviewer -> END;
            cancel -> END;
            noop ?> "route" -> [END, reviewer];
            [writer, tally] -> noop;
        }
        dynamic { cancel }
    };
    assert_eq!(graph.nodes().count(), 7);
    assert_eq!(graph.limits().max_supersteps, 20);
    assert_eq!(graph.conditional_edges().len(), 1);
    assert!(graph.edges().any(|(a, b)| a.as_str() == "tally" && b.as_str() == "noop"));
    assert_eq!(graph.aegis_for(&NodeId::new("noop")), Some(&Aegis::default()));
}
