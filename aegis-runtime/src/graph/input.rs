//! `InputMapping`: the template that renders a Paladin node's input from the
//! state and, for a worker template, from the mustered task it runs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::MusterTask;
use crate::state::Battlefield;

/// A Paladin node's input template: `"Answer: {question}"`.
///
/// `{field}` is replaced by the state field's value (strings as they are,
/// anything else as JSON); `{{` and `}}` are literal braces.
///
/// A worker template also reads the task it runs as: `{task.key}` is the
/// task key, `{task.payload}` the whole payload, and `{task.<name>}` (or
/// `{task.payload.<name>}`, for a payload field called `key` or `payload`) a
/// field of the payload, dotted paths reaching into nested objects and
/// arrays. A state field can never be named with a dot, so `task.`
/// placeholders never shadow one. The task's position in its muster is not
/// in scope: the node cache keys a task by its key and payload, so a prompt
/// must depend on nothing else of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputMapping {
    template: String,
    /// Set by [`InputMapping::task_independent`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    task_independent: bool,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template names a field the snapshot does not have.
    #[error("the input template names field `{0}`, which is not set")]
    MissingField(String),
    /// A `{` without its `}`.
    #[error("unclosed `{{` in the input template")]
    Unclosed,
    /// The template reads the task, but the node is not running as one.
    #[error("the input template reads `{{{0}}}`, but the node is not running as a mustered task")]
    NoTask(String),
    /// The template names a payload field the task does not carry.
    #[error("the input template names task field `{0}`, which this task's payload does not have")]
    MissingTaskField(String),
}

/// What one `task.` placeholder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskRead<'a> {
    /// `task.key`.
    Key,
    /// The payload, or (with a path) one of its fields: `a.b.0`.
    Payload(Option<&'a str>),
}

impl<'a> TaskRead<'a> {
    /// What `name` reads of the task, when it is a `task.` placeholder.
    fn parse(name: &'a str) -> Option<Self> {
        let rest = name.strip_prefix("task.")?;
        Some(match rest {
            "key" => TaskRead::Key,
            "payload" => TaskRead::Payload(None),
            _ => TaskRead::Payload(Some(rest.strip_prefix("payload.").unwrap_or(rest))),
        })
    }
}

impl InputMapping {
    /// A template.
    pub fn new(template: impl Into<String>) -> Self {
        InputMapping {
            template: template.into(),
            task_independent: false,
        }
    }

    /// Marks a worker template's input as the same for every task on
    /// purpose. Validation otherwise refuses a Paladin worker template whose
    /// input reads no `task.` placeholder: every task would send the same
    /// prompt.
    pub fn task_independent(mut self) -> Self {
        self.task_independent = true;
        self
    }

    /// Whether [`InputMapping::task_independent`] marked it.
    pub fn is_task_independent(&self) -> bool {
        self.task_independent
    }

    /// The raw template.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The state field names the template references, in order of
    /// appearance (`task.` placeholders are not state fields).
    pub fn fields(&self) -> Result<Vec<String>, TemplateError> {
        let mut out = Vec::new();
        self.walk(|piece| {
            if let Piece::Field(f) = piece
                && TaskRead::parse(f).is_none()
            {
                out.push(f.to_string());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The `task.` placeholders the template references, in order of
    /// appearance, as written (`"task.key"`, `"task.question"`).
    pub fn task_placeholders(&self) -> Result<Vec<String>, TemplateError> {
        let mut out = Vec::new();
        self.walk(|piece| {
            if let Piece::Field(f) = piece
                && TaskRead::parse(f).is_some()
            {
                out.push(f.to_string());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The payload fields the template reads (the first segment of each
    /// `task.<field>` path), in order of appearance.
    pub fn task_fields(&self) -> Result<Vec<String>, TemplateError> {
        let mut out = Vec::new();
        self.walk(|piece| {
            if let Piece::Field(f) = piece
                && let Some(TaskRead::Payload(Some(path))) = TaskRead::parse(f)
            {
                let first = path.split('.').next().unwrap_or(path);
                out.push(first.to_string());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Renders the template from a snapshot, with no task in scope.
    pub fn render(&self, state: &Battlefield) -> Result<String, TemplateError> {
        self.render_with(state, None)
    }

    /// Renders the template from a snapshot and, for a mustered task, the
    /// task it runs as.
    pub fn render_with(
        &self,
        state: &Battlefield,
        task: Option<&MusterTask>,
    ) -> Result<String, TemplateError> {
        self.render_task(state, task.map(|t| (t.task_key.as_str(), &t.payload)))
    }

    /// [`InputMapping::render_with`] from the task's key and payload: all
    /// of a task a prompt (and so a cache key) may depend on.
    pub(crate) fn render_task(
        &self,
        state: &Battlefield,
        task: Option<(&str, &Value)>,
    ) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(self.template.len());
        self.walk(|piece| {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => match TaskRead::parse(f) {
                    None => match state.get(f) {
                        Some(v) => push_value(&mut out, v),
                        None => return Err(TemplateError::MissingField(f.to_string())),
                    },
                    Some(read) => {
                        let (key, payload) =
                            task.ok_or_else(|| TemplateError::NoTask(f.to_string()))?;
                        match read {
                            TaskRead::Key => out.push_str(key),
                            TaskRead::Payload(None) => push_value(&mut out, payload),
                            TaskRead::Payload(Some(path)) => {
                                let v = lookup(payload, path)
                                    .ok_or_else(|| TemplateError::MissingTaskField(path.into()))?;
                                push_value(&mut out, v);
                            }
                        }
                    }
                },
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn walk<'a>(
        &'a self,
        mut visit: impl FnMut(Piece<'a>) -> Result<(), TemplateError>,
    ) -> Result<(), TemplateError> {
        let t = self.template.as_str();
        let mut rest = t;
        while let Some(i) = rest.find(['{', '}']) {
            let (text, tail) = rest.split_at(i);
            visit(Piece::Text(text))?;
            if let Some(after) = tail.strip_prefix("{{") {
                visit(Piece::Text("{"))?;
                rest = after;
            } else if let Some(after) = tail.strip_prefix("}}") {
                visit(Piece::Text("}"))?;
                rest = after;
            } else if let Some(stripped) = tail.strip_prefix('{') {
                let end = stripped.find('}').ok_or(TemplateError::Unclosed)?;
                visit(Piece::Field(stripped[..end].trim()))?;
                rest = &stripped[end + 1..];
            } else {
                visit(Piece::Text("}"))?;
                rest = &tail[1..];
            }
        }
        visit(Piece::Text(rest))
    }
}

/// Strings as they are, anything else as JSON.
fn push_value(out: &mut String, v: &Value) {
    match v {
        Value::String(s) => out.push_str(s),
        other => out.push_str(&other.to_string()),
    }
}

/// The value at a dotted `path` inside `v`: object keys, or array indices.
fn lookup<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(v, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(items) => items.get(seg.parse::<usize>().ok()?),
        _ => None,
    })
}

enum Piece<'a> {
    Text(&'a str),
    Field(&'a str),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BattlefieldSchema, DispatchRule, FieldName, FieldSpec};

    #[test]
    fn renders_fields_and_escapes() {
        let schema = BattlefieldSchema::new(vec![
            FieldSpec::new(
                FieldName::new("q").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
            FieldSpec::new(
                FieldName::new("n").unwrap(),
                DispatchRule::LastWrite,
                None,
                false,
            ),
        ]);
        let state =
            crate::state::initial_state(&schema, &serde_json::json!({"q": "why?", "n": [1]}))
                .unwrap();
        let m = InputMapping::new("Q: {q} {{literal}} n={n}");
        assert_eq!(m.render(&state).unwrap(), "Q: why? {literal} n=[1]");
        assert_eq!(m.fields().unwrap(), ["q", "n"]);
        assert_eq!(
            InputMapping::new("{missing}").render(&state),
            Err(TemplateError::MissingField("missing".into()))
        );
        assert_eq!(
            InputMapping::new("{oops").fields(),
            Err(TemplateError::Unclosed)
        );
    }

    #[test]
    fn renders_the_task_in_scope() {
        let state = Battlefield::new();
        let task = MusterTask {
            task_key: "q7".into(),
            payload: serde_json::json!({"question": "why?", "key": "k", "tags": ["a", {"b": 2}]}),
            index: 7,
        };
        let m = InputMapping::new(
            "{task.key}: {task.question} {task.payload.key} {task.tags.1.b} {task.tags}",
        );
        assert_eq!(
            m.render_with(&state, Some(&task)).unwrap(),
            r#"q7: why? k 2 ["a",{"b":2}]"#
        );
        assert_eq!(m.fields().unwrap(), Vec::<String>::new(), "no state field");
        assert_eq!(
            m.task_fields().unwrap(),
            ["question", "key", "tags", "tags"]
        );
        assert_eq!(
            InputMapping::new("{task.missing.x}").render_with(&state, Some(&task)),
            Err(TemplateError::MissingTaskField("missing.x".into()))
        );
        let no_task = InputMapping::new("{task.key}").render(&state).unwrap_err();
        assert_eq!(no_task, TemplateError::NoTask("task.key".into()));
        assert!(no_task.to_string().contains("`{task.key}`"), "{no_task}");
        // `{task}` alone is a state field, as before.
        assert_eq!(InputMapping::new("{task}").fields().unwrap(), ["task"]);
    }

    #[test]
    fn the_task_independent_mark_survives_serde_and_is_absent_when_unset() {
        let m = InputMapping::new("same").task_independent();
        let back: InputMapping = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert!(back.is_task_independent());
        let plain = serde_json::to_value(InputMapping::new("x")).unwrap();
        assert_eq!(plain, serde_json::json!({"template": "x"}));
    }
}
