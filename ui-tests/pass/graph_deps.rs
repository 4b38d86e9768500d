//! `#[aegis]` functions that take a dependency first: declared with their
//! instance in graph! (by path, renamed, as a worker template, under an
//! override), and added with `name::with(..)` by the builder; the instance
//! may be owned, an `Arc`, or a trait object.
#![deny(warnings)]

use aegis::prelude::*;
use aegis::graph::{AegisDepsFn, AegisDepsNode};
use std::sync::Arc;

/// A client the nodes share.
pub struct Researcher {
    prefix: String,
}

/// What a provider can do, as a trait object dependency.
pub trait Ask: Send + Sync {
    /// An answer.
    fn ask(&self, q: &str) -> String;
}

impl Ask for Researcher {
    fn ask(&self, q: &str) -> String {
        format!("{}{q}", self.prefix)
    }
}

mod nodes {
    use super::{Ask, Researcher};
    use aegis::prelude::*;

    /// A documented public node with a dependency and explicit lifetimes.
    #[aegis(retry(max = 3), cache(ttl = "1m", key = fields(question)))]
    pub async fn answer<'a>(
        researcher: &'a Researcher,
        state: &'a Battlefield,
        _ctx: &'a NodeContext,
    ) -> Result<StateDelta, StateNodeError> {
        let q = state.get("question").and_then(|q| q.as_str()).unwrap_or("");
        let mut delta = StateDelta::new();
        delta.set("answer", researcher.ask(q))?;
        Ok(delta)
    }

    /// A trait object dependency, routing failures.
    #[aegis(id = "scorer", on_error(route = fallback, error_field = score_error))]
    pub async fn score(
        model: &dyn Ask,
        _: &Battlefield,
        _: &NodeContext,
    ) -> Result<Directive, StateNodeError> {
        let mut delta = StateDelta::new();
        delta.set("score", model.ask("score").len())?;
        Ok(Directive::end(delta))
    }

    /// A worker template with a dependency.
    #[aegis(timeout(run = "5s"))]
    pub async fn fan(
        researcher: &Researcher,
        _: &Battlefield,
        ctx: &NodeContext,
    ) -> Result<StateDelta, StateNodeError> {
        let mut delta = StateDelta::new();
        delta.set("answers", vec![format!("{}{:?}", researcher.prefix, ctx.task())])?;
        Ok(delta)
    }
}

#[aegis]
async fn fallback(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let researcher = Arc::new(Researcher {
        prefix: "> ".into(),
    });
    let model: Arc<dyn Ask> = researcher.clone();
    let g = graph! {
        schema {
            question: LastWrite,
            answer: LastWrite,
            score: LastWrite,
            score_error: LastWrite,
            answers: Append = [],
        }
        nodes {
            nodes::answer(researcher.clone()),
            scorer = nodes::score(model.clone()),
            #[aegis(retry(max = 2))]
            worker nodes::fan(Researcher { prefix: "- ".into() }),
            fallback,
        }
        edges { START -> answer -> scorer -> END; fallback -> END; fan -> END }
    };
    g.validate().unwrap();
    assert!(g.is_worker_template(&NodeId::new("fan")));
    assert_eq!(
        g.aegis_for(&NodeId::new("answer")),
        Some(&<nodes::answer as AegisDepsFn>::aegis())
    );

    let mut built = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    built
        .add_aegis_node(nodes::answer::with(Researcher {
            prefix: String::new(),
        }))
        .add_aegis_node(nodes::score::with(model))
        .add_aegis_node(AegisDepsNode::<nodes::fan>::new(researcher));
    assert_eq!(built.nodes().count(), 3);
}
