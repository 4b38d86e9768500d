use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state::Battlefield;

/// A Paladin node's input template: `"Answer: {question}"`.
///
/// `{field}` is replaced by the field's value (strings as they are, anything
/// else as JSON); `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputMapping {
    template: String,
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
}

impl InputMapping {
    /// A template.
    pub fn new(template: impl Into<String>) -> Self {
        InputMapping {
            template: template.into(),
        }
    }

    /// The raw template.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The field names the template references, in order of appearance.
    pub fn fields(&self) -> Result<Vec<String>, TemplateError> {
        let mut out = Vec::new();
        self.walk(|piece| {
            if let Piece::Field(f) = piece {
                out.push(f.to_string());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Renders the template from a snapshot.
    pub fn render(&self, state: &Battlefield) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(self.template.len());
        self.walk(|piece| {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => match state.get(f) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => return Err(TemplateError::MissingField(f.to_string())),
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
}
