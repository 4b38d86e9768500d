//! JSON decoding helpers shared by the provider adapters.

use serde_json::Value;

use crate::error::{KnownSecrets, LlmError};

/// Parses a tool call's JSON arguments (an empty string means no arguments).
pub(crate) fn tool_arguments(
    provider: &str,
    secrets: &KnownSecrets,
    name: &str,
    raw: &str,
) -> Result<Value, LlmError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(raw).map_err(|e| {
        LlmError::ParseError(secrets.redact_excerpt(&format!(
            "{provider}: arguments of tool call `{name}` are not JSON: {e}"
        )))
    })
}

pub(crate) fn parse_error(
    provider: &str,
    secrets: &KnownSecrets,
    what: &str,
    e: &serde_json::Error,
) -> LlmError {
    // serde_json quotes offending values ("invalid type: string \"...\""),
    // which are provider text: secrets go, then the rest is bounded.
    LlmError::ParseError(secrets.redact_excerpt(&format!("{provider}: malformed {what}: {e}")))
}
