//! The attribute's mistake is reported at its token, in the module that
//! declares the function.
use aegis::prelude::*;

mod nodes {
    use aegis::prelude::*;

    #[aegis(on_error(route = refund))]
    pub async fn charge(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }
}

#[aegis]
async fn refnd(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let _ = graph! {
        schema { charge_error: LastWrite }
        nodes { nodes::charge, refnd }
        edges { START -> charge -> END; refnd -> END; }
    };
}
