//! The barrier merge: applying a superstep's deltas by dispatch rule.

use imbl::Vector;
use serde_json::{Map, Number, Value};
use std::fmt;
use std::sync::Arc;

use super::slot::Slot;
use super::{Battlefield, BattlefieldSchema, DispatchRule, FieldName, StateDelta};
use crate::few::Few;

/// Who wrote a delta: a node, and the task key when it ran as a mustered task.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct Writer {
    /// The writing node's id.
    pub node: String,
    /// The mustered task's key, if any.
    pub task_key: Option<String>,
}

impl Writer {
    /// A plain node writer.
    pub fn node(node: impl Into<String>) -> Self {
        Writer {
            node: node.into(),
            task_key: None,
        }
    }
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.task_key {
            None => write!(f, "{}", self.node),
            Some(k) => write!(f, "{}[{k}]", self.node),
        }
    }
}

/// Why a merge (or an initial input) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Several writers wrote one `LastWrite` field in one superstep.
    #[error("conflicting writes to LastWrite field `{field}` by {}", join(writers))]
    ConflictingWrites {
        /// The field.
        field: FieldName,
        /// Every writer, in vanguard order.
        writers: Vec<Writer>,
    },
    /// A node wrote a field the schema does not declare.
    #[error("`{writer}` wrote undeclared field `{field}`")]
    UndeclaredFieldWrite {
        /// The writer.
        writer: Writer,
        /// The undeclared field.
        field: FieldName,
    },
    /// A value its field's dispatch rule cannot take (a string into `Sum`, ...).
    #[error("`{writer}` wrote {found} to {rule:?} field `{field}`")]
    DispatchTypeMismatch {
        /// The writer.
        writer: Writer,
        /// The field.
        field: FieldName,
        /// The field's rule.
        rule: DispatchRule,
        /// What kind of value was written.
        found: &'static str,
    },
    /// The initial input is not a JSON object.
    #[error("the initial input must be a JSON object, got {0}")]
    InputNotAnObject(&'static str),
    /// The initial input sets fields the schema does not declare.
    #[error("the initial input sets undeclared fields: {}", join(fields))]
    InputFieldsUndeclared {
        /// Every undeclared field, sorted.
        fields: Vec<String>,
    },
    /// The initial input omits required fields.
    #[error("the initial input omits required fields: {}", join(fields))]
    MissingRequiredFields {
        /// Every missing field, in declaration order.
        fields: Vec<FieldName>,
    },
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
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

/// Builds the first snapshot of a run from its input and the schema's defaults.
///
/// Fields the input leaves unset take their default; an `Append` field with
/// neither starts as an empty list.
#[doc(hidden)]
pub fn initial_state(schema: &BattlefieldSchema, input: &Value) -> Result<Battlefield, MergeError> {
    let empty = Map::new();
    let obj = match input {
        Value::Object(o) => o,
        Value::Null => &empty,
        other => return Err(MergeError::InputNotAnObject(kind(other))),
    };
    let mut undeclared: Vec<String> = obj
        .keys()
        .filter(|k| schema.field(k).is_none())
        .cloned()
        .collect();
    if !undeclared.is_empty() {
        undeclared.sort();
        return Err(MergeError::InputFieldsUndeclared { fields: undeclared });
    }
    let missing: Vec<FieldName> = schema
        .fields()
        .iter()
        .filter(|f| f.required && !obj.contains_key(f.name.as_str()))
        .map(|f| f.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::MissingRequiredFields { fields: missing });
    }
    let mut state = Battlefield::new();
    let input_writer = || Writer::node("__input__");
    for spec in schema.fields() {
        let value = obj.get(spec.name.as_str()).or(spec.default.as_ref());
        let slot = match (spec.dispatch, value) {
            (DispatchRule::Append, None) => Slot::list(Vector::new()),
            (DispatchRule::Append, Some(Value::Array(items))) => {
                Slot::list(items.iter().cloned().map(Arc::new).collect())
            }
            (DispatchRule::Append, Some(other)) => {
                return Err(MergeError::DispatchTypeMismatch {
                    writer: input_writer(),
                    field: spec.name.clone(),
                    rule: spec.dispatch,
                    found: kind(other),
                });
            }
            (DispatchRule::Sum, Some(v)) if !v.is_number() => {
                return Err(MergeError::DispatchTypeMismatch {
                    writer: input_writer(),
                    field: spec.name.clone(),
                    rule: spec.dispatch,
                    found: kind(v),
                });
            }
            (DispatchRule::Merge, Some(v)) if !v.is_object() => {
                return Err(MergeError::DispatchTypeMismatch {
                    writer: input_writer(),
                    field: spec.name.clone(),
                    rule: spec.dispatch,
                    found: kind(v),
                });
            }
            (_, Some(v)) => Slot::value(v.clone()),
            (_, None) => continue,
        };
        state.insert_slot(spec.name.clone(), slot);
    }
    Ok(state)
}

/// Who wrote a delta, for a merge's error: built only when a merge refuses
/// a write, so the barrier of every superstep formats no writer names.
pub(crate) trait MergeWriter {
    /// The writer, as an error names it.
    fn writer(&self) -> Writer;
}

impl MergeWriter for Writer {
    fn writer(&self) -> Writer {
        self.clone()
    }
}

/// Merges a superstep's deltas into `base`, in the order given (vanguard order).
///
/// Checks everything before applying anything, so a refused merge leaves no
/// partial result behind.
#[doc(hidden)]
pub fn merge<'a>(
    schema: &BattlefieldSchema,
    base: &Battlefield,
    writes: impl IntoIterator<Item = (Writer, &'a StateDelta)>,
) -> Result<Battlefield, MergeError> {
    let writes: Vec<(Writer, &StateDelta)> = writes.into_iter().collect();
    merge_with(schema, base, &writes)
}

/// A field's value while a merge accumulates its writes.
enum Pending {
    Value(Value),
    List(Vector<Arc<Value>>),
}

/// [`merge`], naming writers only if it refuses one. Each written field's
/// writes accumulate into one new value, stored once: a muster of many
/// tasks appending to one list extends one vector in place rather than
/// copying its tail once per task.
pub(crate) fn merge_with<W: MergeWriter>(
    schema: &BattlefieldSchema,
    base: &Battlefield,
    writes: &[(W, &StateDelta)],
) -> Result<Battlefield, MergeError> {
    // LastWrite fields and the write that set them, to find conflicts.
    let mut last_writes: Few<(&FieldName, usize)> = Few::default();
    for (i, (writer, delta)) in writes.iter().enumerate() {
        for (field, value) in delta.iter() {
            let Some(spec) = schema.spec_of(field) else {
                return Err(MergeError::UndeclaredFieldWrite {
                    writer: writer.writer(),
                    field: field.clone(),
                });
            };
            let ok = match spec.dispatch {
                DispatchRule::LastWrite | DispatchRule::Append => true,
                DispatchRule::Sum => value.is_number(),
                DispatchRule::Merge => value.is_object(),
            };
            if !ok {
                return Err(MergeError::DispatchTypeMismatch {
                    writer: writer.writer(),
                    field: field.clone(),
                    rule: spec.dispatch,
                    found: kind(value),
                });
            }
            if spec.dispatch == DispatchRule::LastWrite {
                last_writes.push((field, i));
            }
        }
    }
    if last_writes.len() > 1 {
        // The first conflicting field by name, its writers in vanguard order.
        last_writes.as_mut_slice().sort_unstable();
        if let Some(group) = last_writes
            .as_slice()
            .chunk_by(|a, b| a.0 == b.0)
            .find(|group| group.len() > 1)
        {
            return Err(MergeError::ConflictingWrites {
                field: group[0].0.clone(),
                writers: group.iter().map(|(_, i)| writes[*i].0.writer()).collect(),
            });
        }
    }

    let mut pending: Few<(&FieldName, Pending)> = Few::default();
    for (writer, delta) in writes {
        for (field, value) in delta.iter() {
            let Some(spec) = schema.spec_of(field) else {
                continue; // checked above
            };
            let at = match pending.iter().position(|(f, _)| *f == field) {
                Some(at) => at,
                None => {
                    pending.push((field, current(base, field, spec.dispatch)));
                    pending.len() - 1
                }
            };
            let Some((_, acc)) = pending.as_mut_slice().get_mut(at) else {
                continue; // `at` is an index into `pending`
            };
            match (spec.dispatch, acc) {
                (DispatchRule::Append, Pending::List(items)) => match value {
                    Value::Array(new) => items.extend(new.iter().cloned().map(Arc::new)),
                    other => items.push_back(Arc::new(other.clone())),
                },
                (DispatchRule::Sum, Pending::Value(current)) => {
                    *current = add(Some(&*current), value).ok_or_else(|| {
                        MergeError::DispatchTypeMismatch {
                            writer: writer.writer(),
                            field: field.clone(),
                            rule: spec.dispatch,
                            found: "a sum that is not a finite number",
                        }
                    })?;
                }
                (DispatchRule::Merge, Pending::Value(Value::Object(obj))) => {
                    if let Value::Object(new) = value {
                        for (k, v) in new {
                            obj.insert(k.clone(), v.clone());
                        }
                    }
                }
                (_, acc) => *acc = Pending::Value(value.clone()),
            }
        }
    }

    let mut state = base.clone();
    for (field, value) in pending {
        let slot = match value {
            Pending::Value(v) => Slot::value(v),
            Pending::List(items) => Slot::list(items),
        };
        state.insert_slot(field.clone(), slot);
    }
    Ok(state)
}

/// What a field's writes in a merge start from: its value in `base`, in
/// the form its rule accumulates (an absent field sums from nothing and
/// merges into an empty object).
fn current(base: &Battlefield, field: &FieldName, rule: DispatchRule) -> Pending {
    match rule {
        DispatchRule::Append => Pending::List(match base.slot(field) {
            Some(Slot::List(list)) => list.items.clone(),
            Some(slot @ (Slot::Small(_) | Slot::Value(_))) => match slot.get() {
                Value::Array(a) => a.iter().cloned().map(Arc::new).collect(),
                other => Vector::unit(Arc::new(other.clone())),
            },
            None => Vector::new(),
        }),
        DispatchRule::Sum => Pending::Value(
            base.slot(field)
                .map(Slot::get)
                .cloned()
                .unwrap_or(Value::Null),
        ),
        DispatchRule::Merge => {
            Pending::Value(Value::Object(match base.slot(field).map(Slot::get) {
                Some(Value::Object(o)) => o.clone(),
                _ => Map::new(),
            }))
        }
        DispatchRule::LastWrite => Pending::Value(Value::Null),
    }
}

fn add(current: Option<&Value>, delta: &Value) -> Option<Value> {
    let current = match current {
        None | Some(Value::Null) => return Some(delta.clone()),
        Some(v) => v,
    };
    if let (Some(a), Some(b)) = (current.as_i64(), delta.as_i64())
        && let Some(sum) = a.checked_add(b)
    {
        return Some(Value::from(sum));
    }
    let sum = current.as_f64()? + delta.as_f64()?;
    Number::from_f64(sum).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FieldSpec;
    use serde_json::json;

    fn schema() -> BattlefieldSchema {
        let f = |n: &str, d| FieldSpec::new(FieldName::new(n).unwrap(), d, None, false);
        BattlefieldSchema::new(vec![
            f("last", DispatchRule::LastWrite),
            f("log", DispatchRule::Append),
            f("total", DispatchRule::Sum),
            f("obj", DispatchRule::Merge),
        ])
    }

    fn delta(pairs: &[(&str, Value)]) -> StateDelta {
        let mut d = StateDelta::new();
        for (k, v) in pairs {
            d.set(*k, v).unwrap();
        }
        d
    }

    #[test]
    fn every_rule_merges_in_the_given_order() {
        let s = schema();
        let base = initial_state(&s, &json!({"total": 1})).unwrap();
        let a = delta(&[
            ("log", json!("a")),
            ("total", json!(2)),
            ("obj", json!({"k": 1, "a": true})),
        ]);
        let b = delta(&[
            ("log", json!(["b1", "b2"])),
            ("total", json!(0.5)),
            ("obj", json!({"k": 2})),
        ]);
        let c = delta(&[("last", json!("c"))]);
        let merged = merge(
            &s,
            &base,
            [
                (Writer::node("a"), &a),
                (Writer::node("b"), &b),
                (Writer::node("c"), &c),
            ],
        )
        .unwrap();
        assert_eq!(merged.get("log"), Some(&json!(["a", "b1", "b2"])));
        assert_eq!(merged.get("total"), Some(&json!(3.5)));
        assert_eq!(merged.get("obj"), Some(&json!({"k": 2, "a": true})));
        assert_eq!(merged.get("last"), Some(&json!("c")));
        // The reverse order appends in the reverse order: order is the caller's.
        let reversed = merge(
            &s,
            &base,
            [(Writer::node("b"), &b), (Writer::node("a"), &a)],
        )
        .unwrap();
        assert_eq!(reversed.get("log"), Some(&json!(["b1", "b2", "a"])));
        assert_eq!(reversed.get("obj"), Some(&json!({"k": 1, "a": true})));
    }

    #[test]
    fn two_last_write_writers_conflict_naming_both() {
        let s = schema();
        let base = Battlefield::new();
        let a = delta(&[("last", json!(1))]);
        let b = delta(&[("last", json!(2))]);
        let err = merge(
            &s,
            &base,
            [(Writer::node("a"), &a), (Writer::node("b"), &b)],
        )
        .unwrap_err();
        assert_eq!(
            err,
            MergeError::ConflictingWrites {
                field: FieldName::new("last").unwrap(),
                writers: vec![Writer::node("a"), Writer::node("b")],
            }
        );
        assert!(err.to_string().contains("`a`, `b`"));
    }

    #[test]
    fn undeclared_and_mistyped_writes_are_refused() {
        let s = schema();
        let base = Battlefield::new();
        let d = delta(&[("nope", json!(1))]);
        assert!(matches!(
            merge(&s, &base, [(Writer::node("n"), &d)]),
            Err(MergeError::UndeclaredFieldWrite { writer, field }) if writer.node == "n" && field.as_str() == "nope"
        ));
        let d = delta(&[("total", json!("x"))]);
        assert!(matches!(
            merge(&s, &base, [(Writer::node("n"), &d)]),
            Err(MergeError::DispatchTypeMismatch {
                rule: DispatchRule::Sum,
                ..
            })
        ));
    }

    #[test]
    fn input_is_checked_against_the_schema() {
        let mut s = schema();
        s = BattlefieldSchema::new(
            s.fields()
                .iter()
                .cloned()
                .chain([FieldSpec::new(
                    FieldName::new("q").unwrap(),
                    DispatchRule::LastWrite,
                    None,
                    true,
                )])
                .collect(),
        );
        assert!(matches!(
            initial_state(&s, &json!({"zz": 1, "aa": 2, "q": 1})),
            Err(MergeError::InputFieldsUndeclared { fields }) if fields == ["aa", "zz"]
        ));
        assert!(matches!(
            initial_state(&s, &json!({})),
            Err(MergeError::MissingRequiredFields { fields }) if fields[0].as_str() == "q"
        ));
        let ok = initial_state(&s, &json!({"q": "?"})).unwrap();
        assert_eq!(ok.get("log"), Some(&json!([])));
    }

    #[test]
    fn unchanged_fields_are_shared_not_copied() {
        let s = schema();
        let base = initial_state(&s, &json!({"last": "big", "log": [1, 2]})).unwrap();
        let d = delta(&[("total", json!(1))]);
        let next = merge(&s, &base, [(Writer::node("n"), &d)]).unwrap();
        assert!(next.shares_field_with(&base, "last"));
        assert!(next.shares_field_with(&base, "log"));
        assert!(!next.shares_field_with(&base, "total"));
    }

    #[test]
    fn appended_since_reads_only_the_new_suffix() {
        let s = schema();
        let base = initial_state(&s, &json!({"log": [1, 2]})).unwrap();
        let d = delta(&[("log", json!([3, 4]))]);
        let next = merge(&s, &base, [(Writer::node("n"), &d)]).unwrap();
        assert_eq!(
            next.appended_since(&base, "log"),
            Some(vec![json!(3), json!(4)])
        );
        assert_eq!(
            base.appended_since(&next, "log"),
            None,
            "shrinking is not appending"
        );
        let other = initial_state(&s, &json!({"log": [1, 2]})).unwrap();
        assert_eq!(next.appended_since(&other, "log"), None, "a different list");
        assert_eq!(next.appended_since(&base, "last"), None, "not a list");
    }
}
