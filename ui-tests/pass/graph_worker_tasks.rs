//! A Paladin worker template in graph! reads its task (`{task.key}`,
//! `{task.<field>}`), or says its prompt is task-independent on purpose;
//! both pass the runtime's validation too.
#![deny(warnings)]

use aegis::prelude::*;

#[aegis]
async fn plan(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
    Ok(StateDelta::new())
}

fn main() {
    let g = graph! {
        schema { topic: LastWrite, answers: Append, summary: LastWrite }
        nodes {
            plan,
            worker answer = paladin(aegis::paladin::Paladin::new("A").with_model("m"), "[{task.key}] {task.question} ({topic})" -> answers),
            worker same = paladin(aegis::paladin::Paladin::new("S").with_model("m"), "Summarise {topic}" -> summary, task_independent),
        }
        edges { START -> plan -> END; answer -> END; same -> END }
    };
    assert!(g.is_worker_template(&NodeId::new("answer")));
    assert!(g.is_worker_template(&NodeId::new("same")));
    g.validate().unwrap();
}
