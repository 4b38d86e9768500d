//! A node nothing leads to, declared in graph!: the error is at its
//! declaration and names the fix, `dynamic { .. }` for a goto target. The
//! first graph is a newcomer's: `plan` jumps to `done` with
//! `Directive::goto`, which needs `done` marked dynamic. Its functions'
//! attributes are read first, since one may route to `done` (as `book`'s
//! does to `cancel`, which is reachable).
use aegis::prelude::*;

#[aegis]
async fn plan(_: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
    Ok(Directive::goto(StateDelta::new(), "done"))
}

#[aegis(retry(max = 2))]
async fn done(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis(on_error(route = cancel, error_field = failure))]
async fn book(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

#[aegis]
async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { failure: LastWrite }
        nodes { plan, done, book, cancel }
        edges {
            START -> plan -> book -> END;
            done -> END;
            cancel -> END;
        }
    };

    // No function to read: the error comes from graph! itself.
    let _ = graph! {
        schema { draft: LastWrite, review: LastWrite }
        nodes {
            write = paladin(aegis::paladin::Paladin::new("writer"), "Write." -> draft),
            critic = paladin(aegis::paladin::Paladin::new("critic"), "Review {draft}." -> review),
        }
        edges {
            START -> write -> END;
            critic -> END;
        }
    };
}
