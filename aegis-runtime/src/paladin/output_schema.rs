//! A small structural check of a Paladin's JSON output against its node's
//! `output_schema`: `type`, `required`, `properties`, `items` and `enum`,
//! recursively. Enough to catch a model that answered in the wrong shape;
//! not a full JSON Schema implementation.

use serde_json::Value;

/// Parses `output` as JSON and checks it against `schema`.
pub(crate) fn parse_and_check(output: &str, schema: &Value) -> Result<Value, String> {
    let trimmed = strip_code_fence(output);
    let value: Value =
        serde_json::from_str(trimmed).map_err(|e| format!("output is not JSON: {e}"))?;
    check(&value, schema, "$")?;
    Ok(value)
}

/// Models often wrap JSON in a Markdown code fence.
fn strip_code_fence(s: &str) -> &str {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

fn check(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        let ok = match ty {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            _ => true,
        };
        if !ok {
            return Err(format!("{path}: expected {ty}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!("{path}: not one of the allowed values"));
    }
    if let (Some(obj), Some(required)) = (
        value.as_object(),
        schema.get("required").and_then(Value::as_array),
    ) {
        for key in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(key) {
                return Err(format!("{path}: missing required property `{key}`"));
            }
        }
    }
    if let (Some(obj), Some(props)) = (
        value.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (key, sub) in props {
            if let Some(v) = obj.get(key) {
                check(v, sub, &format!("{path}.{key}"))?;
            }
        }
    }
    if let (Some(items), Some(sub)) = (value.as_array(), schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check(v, sub, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_shape() {
        let schema = json!({"type": "object", "required": ["score"],
            "properties": {"score": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(
            parse_and_check("```json\n{\"score\": 3}\n```", &schema).unwrap(),
            json!({"score": 3})
        );
        assert!(
            parse_and_check("{\"score\": \"3\"}", &schema)
                .unwrap_err()
                .contains("$.score")
        );
        assert!(
            parse_and_check("{}", &schema)
                .unwrap_err()
                .contains("score")
        );
        assert!(
            parse_and_check("{\"score\":1,\"tags\":[1]}", &schema)
                .unwrap_err()
                .contains("$.tags[0]")
        );
        assert!(parse_and_check("not json", &schema).is_err());
    }
}
