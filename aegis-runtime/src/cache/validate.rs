//! Whether a delta may enter the cache, and whether a stored entry still
//! fits the graph's schema.

use serde_json::Value;

use super::CacheKey;
use crate::state::{BattlefieldSchema, CacheMarker, DispatchRule, FieldName, StateDelta};

/// Whether `delta` may be stored in the node cache: it writes no field the
/// schema marks `CacheMarker::Deny`.
///
/// A field the schema does not declare is not Deny here; such a delta fails
/// its merge, and is never stored for that reason.
#[doc(hidden)]
pub fn delta_is_cacheable(schema: &BattlefieldSchema, delta: &StateDelta) -> bool {
    delta.iter().all(|(field, _)| {
        schema
            .field(field.as_str())
            .is_none_or(|spec| spec.cache != CacheMarker::Deny)
    })
}

/// Why a stored entry is not served: it decodes, but cannot be this
/// lookup's result. The engine treats it as a miss (logged at `warn`); the
/// node runs and its fresh result overwrites the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryMisfit {
    /// The entry records another key than the one it was found under:
    /// copied there by another process, or planted.
    #[error("the entry was stored under another key ({stored_under})")]
    OtherKey {
        /// The key the entry records.
        stored_under: CacheKey,
    },
    /// The delta writes a field the current schema does not declare.
    #[error("the entry writes undeclared field `{field}`")]
    UndeclaredField {
        /// The field.
        field: FieldName,
    },
    /// The delta writes a value its field's dispatch rule rejects (a string
    /// into `Sum`, an array into `Merge`).
    #[error("the entry writes {found} to {rule:?} field `{field}`")]
    DispatchMismatch {
        /// The field.
        field: FieldName,
        /// The field's rule.
        rule: DispatchRule,
        /// What kind of value the entry holds.
        found: &'static str,
    },
    /// The delta writes a field the schema now marks `CacheMarker::Deny`,
    /// which would never have been stored under this schema.
    #[error("the entry writes field `{field}`, marked CacheMarker::Deny")]
    DeniedField {
        /// The field.
        field: FieldName,
    },
}

/// Whether a stored `delta` fits `schema` as the merge will apply it: every
/// field declared and not `Deny`, every value one its dispatch rule takes
/// (`Sum` a number, `Merge` an object; `LastWrite` and `Append` anything,
/// exactly as [`merge`] decides).
pub(crate) fn delta_fits(
    schema: &BattlefieldSchema,
    delta: &StateDelta,
) -> Result<(), EntryMisfit> {
    for (field, value) in delta.iter() {
        let Some(spec) = schema.field(field.as_str()) else {
            return Err(EntryMisfit::UndeclaredField {
                field: field.clone(),
            });
        };
        let accepted = match spec.dispatch {
            DispatchRule::LastWrite | DispatchRule::Append => true,
            DispatchRule::Sum => value.is_number(),
            DispatchRule::Merge => value.is_object(),
        };
        if !accepted {
            return Err(EntryMisfit::DispatchMismatch {
                field: field.clone(),
                rule: spec.dispatch,
                found: kind(value),
            });
        }
        if spec.cache == CacheMarker::Deny {
            return Err(EntryMisfit::DeniedField {
                field: field.clone(),
            });
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FieldSpec;

    fn f(n: &str) -> FieldName {
        FieldName::new(n).unwrap()
    }

    fn deny_schema() -> BattlefieldSchema {
        BattlefieldSchema::new(vec![
            FieldSpec::new(f("answer"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(f("secret"), DispatchRule::LastWrite, None, false)
                .with_cache(CacheMarker::Deny),
            FieldSpec::new(f("audit_log"), DispatchRule::Append, None, false)
                .with_cache(CacheMarker::Deny),
        ])
    }

    #[test]
    fn a_stored_delta_fits_exactly_when_the_merge_would_take_it() {
        use crate::state::{Battlefield, Writer, merge};
        use serde_json::json;
        let schema = BattlefieldSchema::new(vec![
            FieldSpec::new(f("last"), DispatchRule::LastWrite, None, false),
            FieldSpec::new(f("log"), DispatchRule::Append, None, false),
            FieldSpec::new(f("total"), DispatchRule::Sum, None, false),
            FieldSpec::new(f("obj"), DispatchRule::Merge, None, false),
        ]);
        let values = [
            json!(null),
            json!(true),
            json!(3),
            json!(-2.5),
            json!("text"),
            json!([1, "a"]),
            json!({"k": 1}),
        ];
        for field in ["last", "log", "total", "obj", "undeclared"] {
            for value in &values {
                let mut delta = StateDelta::new();
                delta.set(field, value).unwrap();
                let merged = merge(&schema, &Battlefield::new(), [(Writer::node("n"), &delta)]);
                assert_eq!(
                    delta_fits(&schema, &delta).is_ok(),
                    merged.is_ok(),
                    "{field} = {value}"
                );
            }
        }
        let mut sum = StateDelta::new();
        sum.set("total", "12").unwrap();
        assert_eq!(
            delta_fits(&schema, &sum).unwrap_err().to_string(),
            "the entry writes a string to Sum field `total`"
        );
        let mut denied = StateDelta::new();
        denied.set("secret", "s").unwrap();
        assert_eq!(
            delta_fits(&deny_schema(), &denied),
            Err(EntryMisfit::DeniedField { field: f("secret") })
        );
    }

    #[test]
    fn a_delta_touching_a_deny_field_is_not_cacheable() {
        let schema = deny_schema();
        let mut ok = StateDelta::new();
        ok.set("answer", "a").unwrap();
        assert!(delta_is_cacheable(&schema, &ok));
        assert!(delta_is_cacheable(&schema, &StateDelta::new()));
        let mut denied = ok.clone();
        denied.set("audit_log", "entry").unwrap();
        assert!(!delta_is_cacheable(&schema, &denied));
        let mut undeclared = StateDelta::new();
        undeclared.set("elsewhere", 1).unwrap();
        assert!(delta_is_cacheable(&schema, &undeclared));
    }
}
