//! Parsing the policy grammar into its raw form, with darling.
//!
//! The top level and `on_error(..)` are walked key by key, so each section
//! parses (and reports) on its own and the order of handler shapes is known;
//! `retry`, `timeout` and `cache` are darling-derived structs.

use darling::ast::NestedMeta;
use darling::{Error, FromMeta};
use proc_macro2::Span;
use syn::Meta;

use super::values::{
    Absorb, Attempts, Bool, CacheKey, CratePath, CustomName, Dur, Factor, FieldRef, IdLit, NodeRef,
    Predicate, Scope, key_of, key_span,
};
use crate::errors::Errors;

/// A section and the span of its key.
#[derive(Debug, Clone)]
pub(crate) struct Keyed<T> {
    pub(crate) key: Span,
    pub(crate) value: T,
}

#[derive(Debug, Clone, Default, FromMeta)]
pub(crate) struct RawRetry {
    pub(crate) max: Option<Attempts>,
    pub(crate) initial: Option<Dur>,
    pub(crate) factor: Option<Factor>,
    pub(crate) max_interval: Option<Dur>,
    pub(crate) jitter: Option<Bool>,
    pub(crate) on: Option<Predicate>,
    pub(crate) respect_retry_after: Option<Bool>,
    pub(crate) max_retry_after: Option<Dur>,
}

#[derive(Debug, Clone, Default, FromMeta)]
pub(crate) struct RawTimeout {
    pub(crate) run: Option<Dur>,
    pub(crate) idle: Option<Dur>,
    pub(crate) first_chunk: Option<Dur>,
}

#[derive(Debug, Clone, Default, FromMeta)]
pub(crate) struct RawCache {
    pub(crate) ttl: Option<Dur>,
    pub(crate) key: Option<CacheKey>,
    pub(crate) fallback_results: Option<Bool>,
    pub(crate) scope: Option<Scope>,
}

/// One handler shape of `on_error(..)`, in the order written.
#[derive(Debug, Clone)]
pub(crate) enum RawShape {
    Route(NodeRef),
    Absorb(Absorb),
    Custom(CustomName),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RawOnError {
    pub(crate) shapes: Vec<Keyed<RawShape>>,
    pub(crate) error_field: Option<Keyed<FieldRef>>,
}

/// Everything `#[aegis(..)]` can say, as written.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawAegis {
    pub(crate) retry: Option<Keyed<RawRetry>>,
    pub(crate) timeout: Option<Keyed<RawTimeout>>,
    pub(crate) on_error: Option<Keyed<RawOnError>>,
    pub(crate) cache: Option<Keyed<RawCache>>,
    pub(crate) id: Option<Keyed<IdLit>>,
    pub(crate) krate: Option<Keyed<CratePath>>,
}

const TOP_KEYS: [&str; 6] = ["retry", "timeout", "on_error", "cache", "id", "crate"];
const ON_ERROR_KEYS: [&str; 4] = ["route", "error_field", "absorb", "custom"];

/// Parses `retry(..), timeout(..), ..` (the inside of `#[aegis(..)]`).
/// Problems go to `errors`; sections that parsed are kept.
pub(crate) fn parse_aegis(tokens: proc_macro2::TokenStream, errors: &mut Errors) -> RawAegis {
    let mut raw = RawAegis::default();
    let items = match NestedMeta::parse_meta_list(tokens) {
        Ok(items) => items,
        Err(e) => {
            errors.push(e);
            return raw;
        }
    };
    for (key, meta) in keyed_items(&items, &TOP_KEYS, errors) {
        let span = key_span(meta);
        match key.as_str() {
            "retry" => raw.retry = section(meta, errors, Some(RawRetry::default()), RETRY_USAGE),
            "timeout" => raw.timeout = section(meta, errors, None, TIMEOUT_USAGE),
            "cache" => raw.cache = section(meta, errors, None, CACHE_USAGE),
            "on_error" => raw.on_error = parse_on_error(meta, errors),
            "id" => raw.id = keyed_value(meta, span, errors),
            _ => raw.krate = keyed_value(meta, span, errors),
        }
    }
    raw
}

const RETRY_USAGE: &str = "retry(max = 5, initial = \"500ms\", factor = 2.0, max_interval = \"60s\", jitter = false, on = transient)";
const TIMEOUT_USAGE: &str = "timeout(run = \"120s\", idle = \"10s\", first_chunk = \"5s\")";
const CACHE_USAGE: &str =
    "cache(ttl = \"15m\", key = fields(question), fallback_results = true, scope = node)";
const ON_ERROR_USAGE: &str = "on_error(route = cancel), on_error(absorb(summary = \"unavailable\")) or on_error(custom = \"escalate\")";

/// The items whose keys are known and not repeated; the rest are reported.
fn keyed_items<'a>(
    items: &'a [NestedMeta],
    known: &[&str],
    errors: &mut Errors,
) -> Vec<(String, &'a Meta)> {
    let mut out: Vec<(String, &Meta)> = Vec::new();
    for item in items {
        let NestedMeta::Meta(meta) = item else {
            errors.error(
                syn::spanned::Spanned::span(item),
                format!(
                    "expected `key(..)` or `key = value` here, one of: {}",
                    known.join(", ")
                ),
            );
            continue;
        };
        let key = key_of(meta);
        if !known.contains(&key.as_str()) {
            errors.darling(Error::unknown_field_with_alts(&key, known).with_span(meta.path()));
        } else if out.iter().any(|(k, _)| *k == key) {
            errors.darling(Error::duplicate_field(&key).with_span(meta.path()));
        } else {
            out.push((key, meta));
        }
    }
    out
}

/// A `key(..)` section; `bare` is its value when written as a bare word.
fn section<T: FromMeta>(
    meta: &Meta,
    errors: &mut Errors,
    bare: Option<T>,
    usage: &str,
) -> Option<Keyed<T>> {
    let key = key_span(meta);
    let parsed = match meta {
        Meta::List(list) => NestedMeta::parse_meta_list(list.tokens.clone())
            .map_err(Error::from)
            .and_then(|items| T::from_list(&items)),
        Meta::Path(_) => bare.ok_or_else(|| {
            Error::custom(format!(
                "`{}` needs its settings: write e.g. `{usage}`",
                key_of(meta)
            ))
            .with_span(meta)
        }),
        Meta::NameValue(nv) => Err(Error::custom(format!(
            "write `{}` with its settings in parentheses, e.g. `{usage}`",
            key_of(meta)
        ))
        .with_span(&nv.eq_token)),
    };
    match parsed {
        Ok(value) => Some(Keyed { key, value }),
        Err(e) => {
            errors.darling(e);
            None
        }
    }
}

fn keyed_value<T: FromMeta>(meta: &Meta, key: Span, errors: &mut Errors) -> Option<Keyed<T>> {
    match T::from_meta(meta) {
        Ok(value) => Some(Keyed { key, value }),
        Err(e) => {
            errors.darling(e);
            None
        }
    }
}

fn parse_on_error(meta: &Meta, errors: &mut Errors) -> Option<Keyed<RawOnError>> {
    let key = key_span(meta);
    let Meta::List(list) = meta else {
        errors.error(
            key,
            format!("`on_error` needs a handler: write {ON_ERROR_USAGE}"),
        );
        return None;
    };
    let items = match NestedMeta::parse_meta_list(list.tokens.clone()) {
        Ok(items) => items,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let mut raw = RawOnError::default();
    let before = errors.len();
    for (name, item) in keyed_items(&items, &ON_ERROR_KEYS, errors) {
        let span = key_span(item);
        match name.as_str() {
            "route" => {
                if let Some(k) = keyed_value::<NodeRef>(item, span, errors) {
                    raw.shapes.push(Keyed {
                        key: k.key,
                        value: RawShape::Route(k.value),
                    });
                }
            }
            "absorb" => {
                if let Some(k) = keyed_value::<Absorb>(item, span, errors) {
                    raw.shapes.push(Keyed {
                        key: k.key,
                        value: RawShape::Absorb(k.value),
                    });
                }
            }
            "custom" => {
                if let Some(k) = keyed_value::<CustomName>(item, span, errors) {
                    raw.shapes.push(Keyed {
                        key: k.key,
                        value: RawShape::Custom(k.value),
                    });
                }
            }
            _ => raw.error_field = keyed_value(item, span, errors),
        }
    }
    // A section with a broken item is dropped whole, as darling drops a
    // struct with a broken field: later checks would only echo the problem.
    (errors.len() == before).then_some(Keyed { key, value: raw })
}
