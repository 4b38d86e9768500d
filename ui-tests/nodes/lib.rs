//! `#[aegis]` functions in a crate of their own: `graph!` in another crate
//! (`ui-tests/pass/graph_descriptors.rs`,
//! `ui-tests/fail/graph_attribute_in_another_crate.rs`, `tests/dsl_graph.rs`)
//! names them by path, and reads their attributes through their descriptor
//! macros.

use aegis::prelude::*;

/// Books a seat; after three attempts its error goes to `book_error` and
/// `cancel` runs.
#[aegis(retry(max = 3, initial = "0ms", jitter = false), on_error(route = cancel, error_field = book_error))]
pub async fn book(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    if state.get("traveller").is_none() {
        return Err(StateNodeError::permanent("no traveller"));
    }
    let mut delta = StateDelta::new();
    delta.set("booking", "booked")?;
    Ok(delta)
}

/// Compensates a failed booking.
#[aegis]
pub async fn cancel(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    let mut delta = StateDelta::new();
    delta.set("booking", "cancelled")?;
    Ok(delta)
}

/// Routes its failures to `refund`, a node the graph naming it must declare.
#[aegis(on_error(route = refund))]
pub async fn charge(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

/// A plain `async fn`, without `#[aegis]`: graph! naming it is an error
/// (`ui-tests/fail/graph_not_an_aegis_function_elsewhere.rs`).
pub async fn plain(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}
