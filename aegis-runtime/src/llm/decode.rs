//! JSON decoding helpers shared by the provider adapters.

use serde_json::Value;

use crate::error::{LlmError, redact_excerpt};

/// Parses a tool call's JSON arguments (an empty string means no arguments).
pub(crate) fn tool_arguments(provider: &str, name: &str, raw: &str) -> Result<Value, LlmError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(raw).map_err(|e| {
        LlmError::ParseError(redact_excerpt(&format!(
            "{provider}: arguments of tool call `{name}` are not JSON: {e}"
        )))
    })
}

pub(crate) fn parse_error(provider: &str, what: &str, e: &serde_json::Error) -> LlmError {
    // serde_json quotes offending values ("invalid type: string \"...\""),
    // which are provider text: redact and bound them like any other.
    LlmError::ParseError(redact_excerpt(&format!(
        "{provider}: malformed {what}: {e}"
    )))
}
