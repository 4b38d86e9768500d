//! The values of the policy grammar, each a `darling::FromMeta` that checks
//! what can be checked on its own (a zero attempt count, a malformed
//! duration, a factor below 1) so darling reports those together with
//! unknown and repeated keys.

use darling::{Error, FromMeta, ast::NestedMeta};
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, Meta};

use crate::duration::{format_millis, parse_millis};
use crate::json::Json;
use crate::names::{field_name_problem, name_of};

/// The key of a `key = value` item, as written.
pub(crate) fn key_of(item: &Meta) -> String {
    item.path()
        .get_ident()
        .map_or_else(|| quote::quote!(#item).to_string(), name_of)
}

/// The value expression of `key = value`, or an error showing the form.
fn value_of<'a>(item: &'a Meta, example: &str) -> darling::Result<&'a Expr> {
    match item {
        Meta::NameValue(nv) => Ok(strip_groups(&nv.value)),
        _ => {
            let key = key_of(item);
            Err(
                Error::custom(format!("`{key}` takes a value: write `{key} = {example}`"))
                    .with_span(item),
            )
        }
    }
}

fn strip_groups(mut expr: &Expr) -> &Expr {
    while let Expr::Group(g) = expr {
        expr = &g.expr;
    }
    expr
}

fn lit_of(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        _ => None,
    }
}

/// A bare identifier value (`route = cancel`), if the expression is one.
fn ident_of(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        _ => None,
    }
}

/// `max = 5`: attempts including the first, at least 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempts(pub(crate) u32);

impl FromMeta for Attempts {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "5")?;
        let Some(Lit::Int(n)) = lit_of(expr) else {
            return Err(Error::custom(
                "`max` is a whole number of attempts, including the first: write e.g. `max = 5`",
            )
            .with_span(expr));
        };
        match n.base10_parse::<u64>() {
            Ok(0) => Err(Error::custom(
                "`max = 0` would never run the node: `max` counts attempts including the first, so write `max = 1` for no retries",
            )
            .with_span(n)),
            Ok(v) => u32::try_from(v).map(Attempts).map_err(|_| {
                Error::custom(format!("`max = {v}` is more attempts than a u32 holds: write at most {}", u32::MAX))
                    .with_span(n)
            }),
            Err(_) => Err(Error::custom("`max` is a whole number of attempts: write e.g. `max = 5`").with_span(n)),
        }
    }
}

/// A duration literal, in milliseconds; `key` names the setting it is for.
#[derive(Debug, Clone)]
pub(crate) struct Dur {
    pub(crate) millis: u64,
    pub(crate) span: Span,
}

/// Keys whose zero duration means something: `initial = "0ms"` retries at
/// once, as the runtime documents, and `max_interval` caps waits at it.
const ZERO_ALLOWED: [&str; 2] = ["initial", "max_interval"];

impl FromMeta for Dur {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let key = key_of(item);
        let expr = value_of(item, "\"10s\"")?;
        let Some(Lit::Str(s)) = lit_of(expr) else {
            return Err(Error::custom(format!(
                "`{key}` is a duration string: write e.g. `{key} = \"10s\"` (units: ms, s, m, h)"
            ))
            .with_span(expr));
        };
        let text = s.value();
        let millis =
            parse_millis(&text).map_err(|e| Error::custom(e.message(&text)).with_span(s))?;
        if millis == 0 && !ZERO_ALLOWED.contains(&key.as_str()) {
            return Err(Error::custom(format!(
                "`{key} = \"{text}\"` is zero, which is no bound at all: give a positive duration such as \"10s\", or remove `{key}`"
            ))
            .with_span(s));
        }
        Ok(Dur {
            millis,
            span: s.span(),
        })
    }
}

impl Dur {
    pub(crate) fn display(&self) -> String {
        format_millis(self.millis)
    }
}

/// `factor = 2.0`: at least 1.0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Factor(pub(crate) f64);

impl FromMeta for Factor {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "2.0")?;
        let value = match lit_of(expr) {
            Some(Lit::Float(f)) => f.base10_parse::<f64>().ok(),
            Some(Lit::Int(i)) => i.base10_parse::<u32>().ok().map(f64::from),
            _ => None,
        };
        match value {
            Some(v) if v.is_finite() && v >= 1.0 => Ok(Factor(v)),
            Some(v) => Err(Error::custom(format!(
                "`factor = {v}` would shrink each wait: the backoff factor must be at least 1.0 (1.0 keeps every wait equal to `initial`)"
            ))
            .with_span(expr)),
            None => Err(Error::custom(
                "`factor` is a number, the multiplier between successive waits: write e.g. `factor = 2.0`",
            )
            .with_span(expr)),
        }
    }
}

/// `jitter = false` (a bare `jitter` is `true`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bool(pub(crate) bool);

impl FromMeta for Bool {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        if let Meta::Path(_) = item {
            return Ok(Bool(true));
        }
        let key = key_of(item);
        let expr = value_of(item, "true")?;
        match lit_of(expr) {
            Some(Lit::Bool(b)) => Ok(Bool(b.value)),
            _ => Err(Error::custom(format!(
                "`{key}` is `true` or `false`: write e.g. `{key} = false`"
            ))
            .with_span(expr)),
        }
    }
}

/// `on = transient | unknown | all | never | "custom-name"`.
#[derive(Debug, Clone)]
pub(crate) enum Predicate {
    TransientOnly,
    TransientOrUnknown,
    Always,
    Never,
    Custom(String),
}

const PREDICATES: [&str; 4] = ["transient", "unknown", "all", "never"];

impl FromMeta for Predicate {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "transient")?;
        if let Some(ident) = ident_of(expr) {
            return match name_of(ident).as_str() {
                "transient" => Ok(Predicate::TransientOnly),
                "unknown" => Ok(Predicate::TransientOrUnknown),
                "all" => Ok(Predicate::Always),
                "never" => Ok(Predicate::Never),
                other => Err(Error::unknown_value_with_alts(other, &PREDICATES).with_span(ident)),
            };
        }
        if let Some(Lit::Str(s)) = lit_of(expr) {
            let name = s.value();
            if name.trim().is_empty() {
                return Err(Error::custom(
                    "an empty predicate name can never be registered: write the name you pass to `WarEngine::with_retry_predicate`, e.g. `on = \"rate-limit-only\"`",
                )
                .with_span(s));
            }
            return Ok(Predicate::Custom(name));
        }
        Err(Error::custom(
            "`on` is `transient`, `unknown`, `all`, `never`, or a registered predicate's name in quotes: e.g. `on = unknown` or `on = \"rate-limit-only\"`",
        )
        .with_span(expr))
    }
}

/// A node id written bare: `route = cancel`.
#[derive(Debug, Clone)]
pub(crate) struct NodeRef(pub(crate) Ident);

impl FromMeta for NodeRef {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let key = key_of(item);
        let expr = value_of(item, "cancel")?;
        match ident_of(expr) {
            Some(ident) => Ok(NodeRef(ident.clone())),
            None => Err(Error::custom(format!(
                "`{key}` names a node of the graph, written bare: e.g. `{key} = cancel`"
            ))
            .with_span(expr)),
        }
    }
}

/// A state field written bare: `error_field = booking_error`.
#[derive(Debug, Clone)]
pub(crate) struct FieldRef(pub(crate) Ident);

impl FieldRef {
    fn from_ident(ident: &Ident) -> darling::Result<Self> {
        match field_name_problem(&name_of(ident)) {
            None => Ok(FieldRef(ident.clone())),
            Some(problem) => Err(Error::custom(format!(
                "`{ident}` is not a valid field name: {problem}"
            ))
            .with_span(ident)),
        }
    }
}

impl FromMeta for FieldRef {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let key = key_of(item);
        let expr = value_of(item, "booking_error")?;
        match ident_of(expr) {
            Some(ident) => FieldRef::from_ident(ident),
            None => Err(Error::custom(format!(
                "`{key}` names a state field, written bare: e.g. `{key} = booking_error`"
            ))
            .with_span(expr)),
        }
    }
}

/// `custom = "escalate"`: a non-empty registered name.
#[derive(Debug, Clone)]
pub(crate) struct CustomName(pub(crate) String);

impl FromMeta for CustomName {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "\"escalate\"")?;
        match lit_of(expr) {
            Some(Lit::Str(s)) if s.value().trim().is_empty() => Err(Error::custom(
                "an empty handler name can never be registered: write the name you pass to `WarEngine::with_error_handler`, e.g. `custom = \"escalate\"`",
            )
            .with_span(s)),
            Some(Lit::Str(s)) => Ok(CustomName(s.value())),
            _ => Err(Error::custom(
                "`custom` is the registered handler's name in quotes: e.g. `custom = \"escalate\"`",
            )
            .with_span(expr)),
        }
    }
}

/// `key = default` or `key = fields(a, b)`.
#[derive(Debug, Clone)]
pub(crate) enum CacheKey {
    Default,
    Fields(Vec<Ident>),
}

impl FromMeta for CacheKey {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        const USAGE: &str = "`key` is `default` or `fields(a, b, ..)` naming state fields: e.g. `key = fields(question, locale)`";
        let expr = value_of(item, "fields(question)")?;
        if ident_of(expr).is_some_and(|i| i == "default") {
            return Ok(CacheKey::Default);
        }
        let Expr::Call(call) = expr else {
            return Err(Error::custom(USAGE).with_span(expr));
        };
        if ident_of(&call.func).is_none_or(|i| i != "fields") {
            return Err(Error::custom(USAGE).with_span(&call.func));
        }
        if call.args.is_empty() {
            return Err(Error::custom(
                "`fields()` names no field: list at least one, e.g. `fields(question)`, or write `key = default`",
            )
            .with_span(call));
        }
        let mut errors = Error::accumulator();
        let mut fields: Vec<Ident> = Vec::new();
        for arg in &call.args {
            let parsed = match ident_of(strip_groups(arg)) {
                Some(ident) => FieldRef::from_ident(ident).map(|f| f.0),
                None => Err(Error::custom(
                    "a cache key field is a field name written bare, e.g. `question`",
                )
                .with_span(arg)),
            };
            if let Some(ident) = errors.handle(parsed) {
                if fields.contains(&ident) {
                    errors.push(
                        Error::custom(format!("`{ident}` is listed twice: keep one"))
                            .with_span(&ident),
                    );
                } else {
                    fields.push(ident);
                }
            }
        }
        errors.finish_with(CacheKey::Fields(fields))
    }
}

/// `scope = graph | node`: what a node's cache entries belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Graph,
    Node,
}

/// What `scope` takes, and what each value means.
const SCOPE_VALUES: &str = "`graph` (the default: entries are left behind by any change to the graph) or `node` (entries survive edits elsewhere in the graph)";

impl FromMeta for Scope {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "node")?;
        match ident_of(expr) {
            Some(ident) => match name_of(ident).as_str() {
                "graph" => Ok(Scope::Graph),
                "node" => Ok(Scope::Node),
                other => Err(Error::custom(format!(
                    "unknown cache scope `{other}`: write {SCOPE_VALUES}"
                ))
                .with_span(ident)),
            },
            None => Err(Error::custom(format!(
                "`scope` is a bare word, {SCOPE_VALUES}: e.g. `scope = node`"
            ))
            .with_span(expr)),
        }
    }
}

/// `absorb(summary = "unavailable", retries_left = 0)` (or a bare `absorb`:
/// absorb the failure and write nothing).
#[derive(Debug, Clone, Default)]
pub(crate) struct Absorb(pub(crate) Vec<(Ident, Json)>);

impl FromMeta for Absorb {
    fn from_word() -> darling::Result<Self> {
        Ok(Absorb::default())
    }

    fn from_list(items: &[NestedMeta]) -> darling::Result<Self> {
        let mut errors = Error::accumulator();
        let mut writes: Vec<(Ident, Json)> = Vec::new();
        for item in items {
            let write = match item {
                NestedMeta::Meta(Meta::NameValue(nv)) => match nv.path.get_ident() {
                    Some(ident) => FieldRef::from_ident(ident).and_then(|f| {
                        let value = &nv.value;
                        syn::parse2::<Json>(quote::quote!(#value))
                            .map(|v| (f.0, v))
                            .map_err(|e| {
                                Error::custom(format!(
                                    "{e}: an absorbed value is a JSON literal such as \"unavailable\", 0, true, null or [..]"
                                ))
                                .with_span(&nv.value)
                            })
                    }),
                    None => Err(Error::custom("write `field = value`").with_span(&nv.path)),
                },
                other => Err(Error::custom(
                    "`absorb(..)` lists the fields to write instead: e.g. `absorb(summary = \"unavailable\")`",
                )
                .with_span(other)),
            };
            if let Some((field, value)) = errors.handle(write) {
                if writes.iter().any(|(f, _)| *f == field) {
                    errors.push(
                        Error::custom(format!("`{field}` is written twice: keep one"))
                            .with_span(&field),
                    );
                } else {
                    writes.push((field, value));
                }
            }
        }
        errors.finish_with(Absorb(writes))
    }

    fn from_meta(item: &Meta) -> darling::Result<Self> {
        match item {
            Meta::Path(_) => Self::from_word(),
            Meta::List(list) => Self::from_list(&NestedMeta::parse_meta_list(list.tokens.clone())?),
            Meta::NameValue(nv) => Err(Error::custom(
                "write `absorb(field = value, ..)` with the writes in parentheses, not `absorb = ..`",
            )
            .with_span(&nv.eq_token)),
        }
    }
}

/// `id = "book"`.
#[derive(Debug, Clone)]
pub(crate) struct IdLit(pub(crate) String, pub(crate) Span);

impl FromMeta for IdLit {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "\"book\"")?;
        match lit_of(expr) {
            Some(Lit::Str(s)) if s.value().is_empty() => Err(Error::custom(
                "a node id must not be empty: write e.g. `id = \"book\"`, or remove `id` to use the function's name",
            )
            .with_span(s)),
            Some(Lit::Str(s)) if crate::names::RESERVED_IDS.contains(&s.value().as_str()) => Err(Error::custom(format!(
                "`{}` is reserved for the graph's virtual START/END node: choose another id",
                s.value()
            ))
            .with_span(s)),
            Some(Lit::Str(s)) => Ok(IdLit(s.value(), s.span())),
            _ => Err(Error::custom("`id` is a string: write e.g. `id = \"book\"`").with_span(expr)),
        }
    }
}

/// `crate = "::aegis"`: the path of the `aegis` facade.
#[derive(Debug, Clone)]
pub(crate) struct CratePath(pub(crate) syn::Path);

impl FromMeta for CratePath {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let expr = value_of(item, "\"::aegis\"")?;
        match lit_of(expr) {
            Some(Lit::Str(s)) => s.parse::<syn::Path>().map(CratePath).map_err(|_| {
                Error::custom(format!(
                    "`{}` is not a path: write the path of the `aegis` crate, e.g. `crate = \"::aegis\"`",
                    s.value()
                ))
                .with_span(s)
            }),
            _ => Err(Error::custom("`crate` is a path in quotes: write e.g. `crate = \"::aegis\"`").with_span(expr)),
        }
    }
}

/// The span of a meta item's key.
pub(crate) fn key_span(item: &Meta) -> Span {
    item.path().span()
}
