//! The task rules of Paladin inputs: a worker template's prompt reads its
//! task (else every task sends the same prompt, each cached under its own
//! key), only a worker template reads one, and a declared payload shape
//! bounds which `task.` fields it may name.

use crate::error::{EngineError, PolicyOffender};
use crate::graph::{NodeSpec, WarGraph};

/// One `PaladinTaskInput` error listing every offender, or none.
pub(crate) fn task_input_problems(graph: &WarGraph) -> Option<EngineError> {
    let mut offenders = Vec::new();
    for (id, spec) in &graph.nodes {
        let NodeSpec::Paladin { input, .. } = spec else {
            continue;
        };
        // An unclosed template is reported with the state field rules.
        let Ok(placeholders) = input.task_placeholders() else {
            continue;
        };
        let worker = graph.worker_templates.contains(id);
        if !worker {
            if let Some(first) = placeholders.first() {
                offenders.push(PolicyOffender::new(
                    Some(id),
                    format!(
                        "input reads `{{{first}}}`, but the node is not a worker template: \
                         it never runs as a task"
                    ),
                ));
            }
            continue;
        }
        if placeholders.is_empty() && !input.is_task_independent() {
            offenders.push(PolicyOffender::new(
                Some(id),
                format!(
                    "worker template input \"{}\" reads nothing of its task, so every task \
                     sends the same prompt: read `{{task.key}}` or `{{task.<field>}}`, or mark \
                     it `InputMapping::task_independent()`",
                    input.template()
                ),
            ));
        }
        if let (Some(declared), Ok(fields)) = (graph.task_fields.get(id), input.task_fields()) {
            for f in fields.iter().filter(|f| !declared.contains(*f)) {
                let known: Vec<&str> = declared.iter().map(String::as_str).collect();
                offenders.push(PolicyOffender::new(
                    Some(id),
                    format!(
                        "input names task field `{f}`, which its tasks do not carry \
                         (declared: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    (!offenders.is_empty()).then_some(EngineError::PaladinTaskInput { offenders })
}
