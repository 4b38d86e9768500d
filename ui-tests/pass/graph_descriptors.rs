//! graph! reads an #[aegis] function's attribute through the hidden macro the
//! attribute defines beside the function: it works however the function is
//! reached (a path, an import, a glob, another crate, a function body), adds
//! no warning, and shadows no macro the module uses.
#![deny(warnings)]

use aegis::prelude::*;
use aegis_ui_nodes::{book, cancel};

mod nodes {
    use aegis::prelude::*;

    #[aegis(timeout(run = "5s"))]
    pub(crate) async fn review(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    // Its own attribute routes to a node no graph below declares: the graph
    // gives it its own Aegis, which replaces the attribute's.
    #[aegis(on_error(route = nowhere))]
    pub async fn publish(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    pub mod inner {
        // A glob of a module with #[aegis] functions keeps the standard
        // macros usable.
        use super::*;

        pub fn std_macros_still_work() -> usize {
            let _ = (review, publish);
            format!("{:?}", vec![1]).len()
        }
    }
}

// A second `review` in the crate: each has a descriptor of its own.
mod twin {
    use aegis::prelude::*;

    #[aegis(retry(max = 7))]
    pub async fn review(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

// One `macro_rules!` declaring a same-named function twice: each expansion
// has a descriptor of its own.
macro_rules! step_module {
    ($module:ident, $max:literal) => {
        mod $module {
            use aegis::prelude::*;

            #[aegis(retry(max = $max))]
            pub async fn step(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
                Ok(StateDelta::new())
            }
        }
    };
}
step_module!(first, 2);
step_module!(second, 3);

mod glob {
    use super::nodes::*;
    use aegis::prelude::*;
    use std::fmt::Write;

    pub fn graph() -> WarGraph {
        let mut text = String::new();
        let _ = write!(text, "{}", format!("{:?}", vec![1]));
        graph! {
            schema { booking: LastWrite }
            nodes { review }
            edges { START -> review -> END }
        }
    }
}

fn main() {
    // Another crate's functions, through an import and through a path.
    let imported = graph! {
        schema { traveller: LastWrite, booking: LastWrite, book_error: LastWrite }
        nodes { book, cancel }
        edges { START -> book -> END; cancel -> END; }
    };
    let by_path = graph! {
        schema { traveller: LastWrite, booking: LastWrite, book_error: LastWrite }
        nodes { aegis_ui_nodes::book, aegis_ui_nodes::cancel }
        edges { START -> book -> END; cancel -> END; }
    };
    assert_eq!(imported.fingerprint(), by_path.fingerprint());
    assert_eq!(
        imported.aegis_for(&NodeId::new("book")).and_then(|a| a.retry.as_ref()).map(|r| r.max_attempts),
        Some(3)
    );

    // A function declared in a function body.
    #[aegis(retry(max = 2))]
    async fn local(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
    let overridden = graph! {
        nodes {
            local,
            nodes::review,
            #[aegis(retry(max = 4))]
            nodes::publish,
        }
        edges { START -> local -> review -> publish -> END }
    };
    assert_eq!(overridden.nodes().count(), 3);
    assert_eq!(
        overridden.aegis_for(&NodeId::new("publish")).and_then(|a| a.retry.as_ref()).map(|r| r.max_attempts),
        Some(4)
    );
    assert_eq!(glob::graph().nodes().count(), 1);
    let twin = graph! {
        nodes { twin::review }
        edges { START -> review -> END }
    };
    let retries = |graph: WarGraph| {
        graph.aegis_for(&NodeId::new("step")).and_then(|a| a.retry.as_ref()).map(|r| r.max_attempts)
    };
    assert_eq!(retries(graph! { nodes { first::step } edges { START -> step -> END } }), Some(2));
    assert_eq!(retries(graph! { nodes { second::step } edges { START -> step -> END } }), Some(3));
    assert_eq!(
        twin.aegis_for(&NodeId::new("review")).and_then(|a| a.retry.as_ref()).map(|r| r.max_attempts),
        Some(7)
    );
    assert_eq!(nodes::inner::std_macros_still_work(), 3);
}
