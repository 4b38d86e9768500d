//! The policy grammar shared by `#[aegis(..)]`, `graph!`'s `default_aegis`
//! and its per-node overrides: parse (darling) → validate (checks across
//! keys) → expand (an expression building the runtime `Aegis`).

mod expand;
mod parse;
mod values;

pub(crate) use expand::aegis_expr;
pub(crate) use parse::{Keyed, RawRetry, RawTimeout, parse_aegis};
pub(crate) use values::{CacheKey, Dur, Predicate, Scope};

use proc_macro2::{Span, TokenStream};
use syn::Ident;

use crate::duration::format_millis;
use crate::errors::Errors;
use crate::json::Json;
use parse::{RawAegis, RawShape};

/// The runtime defaults the grammar's unset retry keys take, for checks
/// across keys (the generated code takes them from `RetryPolicy::default()`).
const DEFAULT_INITIAL_MS: u64 = 500;
const DEFAULT_MAX_INTERVAL_MS: u64 = 60_000;

/// A validated Aegis, as written.
#[derive(Debug, Clone, Default)]
pub(crate) struct AegisSpec {
    pub(crate) retry: Option<Keyed<RawRetry>>,
    pub(crate) timeout: Option<Keyed<RawTimeout>>,
    pub(crate) on_error: Option<Keyed<Handler>>,
    pub(crate) cache: Option<Keyed<CacheSpec>>,
    /// `id = ".."`: only the attribute accepts it.
    pub(crate) id: Option<(String, Span, Span)>,
    /// `crate = ".."`: only the attribute accepts it.
    pub(crate) krate: Option<(syn::Path, Span)>,
}

#[derive(Debug, Clone)]
pub(crate) enum Handler {
    Route {
        to: Ident,
        error_field: Option<Ident>,
    },
    Absorb(Vec<(Ident, Json)>),
    Custom(String),
}

#[derive(Debug, Clone)]
pub(crate) struct CacheSpec {
    pub(crate) ttl: Dur,
    pub(crate) key: CacheKey,
    /// `fallback_results = true`: store results a fallback provider served.
    pub(crate) fallback_results: bool,
    /// `scope = node | graph` (`graph` when unset).
    pub(crate) scope: Scope,
}

/// Parses and validates the policy grammar; every problem goes to `errors`.
pub(crate) fn parse_and_validate(tokens: TokenStream, errors: &mut Errors) -> AegisSpec {
    let raw = parse_aegis(tokens, errors);
    validate(raw, errors)
}

/// The checks that span several keys.
fn validate(raw: RawAegis, errors: &mut Errors) -> AegisSpec {
    let RawAegis {
        retry,
        timeout,
        on_error,
        cache,
        id,
        krate,
    } = raw;

    if let Some(retry) = &retry {
        check_retry_intervals(&retry.value, errors);
        check_retry_after_cap(&retry.value, errors);
    }

    let timeout = timeout.filter(|t| {
        let empty =
            t.value.run.is_none() && t.value.idle.is_none() && t.value.first_chunk.is_none();
        if empty {
            errors.error(
                t.key,
                "`timeout()` sets no bound: add `run = \"120s\"`, `idle = \"10s\"` and/or `first_chunk = \"5s\"`, or remove `timeout`",
            );
        }
        if let (Some(first), Some(run)) = (&t.value.first_chunk, &t.value.run)
            && first.millis >= run.millis
        {
            errors.error(
                first.span,
                format!(
                    "`first_chunk = \"{}\"` is not shorter than `run = \"{}\"`: the run timeout would always cut the attempt first, so no provider would ever be hopped; lower `first_chunk` or raise `run`",
                    first.display(),
                    run.display()
                ),
            );
        }
        !empty
    });

    let on_error = on_error.and_then(|k| {
        let mut shapes = k.value.shapes.into_iter();
        let Some(first) = shapes.next() else {
            let message = if k.value.error_field.is_some() {
                "`on_error` has an `error_field` but no handler: add `route = <node>` (the node that compensates)"
            } else {
                "`on_error()` names no handler: write `route = <node>`, `absorb(field = value, ..)` or `custom = \"name\"`"
            };
            errors.error(k.key, message);
            return None;
        };
        let first_name = shape_name(&first.value);
        for extra in shapes {
            errors.error(
                extra.key,
                format!(
                    "`on_error` takes one handler and already has `{first_name}`: remove `{}` (or `{first_name}`)",
                    shape_name(&extra.value)
                ),
            );
        }
        let handler = match first.value {
            RawShape::Route(to) => Handler::Route {
                to: to.0,
                error_field: k.value.error_field.map(|f| f.value.0),
            },
            other => {
                if let Some(field) = &k.value.error_field {
                    errors.error(
                        field.key,
                        format!(
                            "`error_field` only applies to `route = ..`, not to `{}`: remove `error_field`, or route to a compensating node",
                            shape_name(&other)
                        ),
                    );
                }
                match other {
                    RawShape::Absorb(a) => Handler::Absorb(a.0),
                    RawShape::Custom(c) => Handler::Custom(c.0),
                    RawShape::Route(_) => unreachable!("matched above"),
                }
            }
        };
        Some(Keyed {
            key: k.key,
            value: handler,
        })
    });

    let cache = cache.and_then(|k| match k.value.ttl {
        Some(ttl) => Some(Keyed {
            key: k.key,
            value: CacheSpec {
                ttl,
                key: k.value.key.unwrap_or(CacheKey::Default),
                fallback_results: k.value.fallback_results.is_some_and(|b| b.0),
                scope: k.value.scope.unwrap_or(Scope::Graph),
            },
        }),
        None => {
            errors.error(
                k.key,
                "`cache` needs a `ttl`, how long an entry is served: write e.g. `cache(ttl = \"15m\")`",
            );
            None
        }
    });

    AegisSpec {
        retry,
        timeout,
        on_error,
        cache,
        id: id.map(|k| (k.value.0, k.value.1, k.key)),
        krate: krate.map(|k| (k.value.0, k.key)),
    }
}

fn shape_name(shape: &RawShape) -> &'static str {
    match shape {
        RawShape::Route(_) => "route",
        RawShape::Absorb(_) => "absorb",
        RawShape::Custom(_) => "custom",
    }
}

/// The runtime rejects `initial_interval > max_interval`; so do we, with
/// the defaults filled in.
fn check_retry_intervals(retry: &RawRetry, errors: &mut Errors) {
    match (&retry.initial, &retry.max_interval) {
        (Some(initial), max) => {
            let (cap, cap_text) = match max {
                Some(m) => (m.millis, format!("`max_interval` (\"{}\")", m.display())),
                None => (
                    DEFAULT_MAX_INTERVAL_MS,
                    format!("the default `max_interval` of \"{}\"", format_millis(DEFAULT_MAX_INTERVAL_MS)),
                ),
            };
            if initial.millis > cap {
                errors.error(
                    initial.span,
                    format!(
                        "`initial = \"{}\"` is longer than {cap_text}, which caps every wait: lower `initial` or raise `max_interval`",
                        initial.display()
                    ),
                );
            }
        }
        (None, Some(max)) if max.millis < DEFAULT_INITIAL_MS => errors.error(
            max.span,
            format!(
                "`max_interval = \"{}\"` is shorter than the default `initial` of \"{}\": set `initial` to at most \"{}\" too",
                max.display(),
                format_millis(DEFAULT_INITIAL_MS),
                max.display()
            ),
        ),
        _ => {}
    }
}

/// `max_retry_after` caps the Retry-After floor: without
/// `respect_retry_after = true` it would cap nothing. (A zero cap is
/// refused by the duration itself.)
fn check_retry_after_cap(retry: &RawRetry, errors: &mut Errors) {
    let on = retry.respect_retry_after.is_some_and(|b| b.0);
    if let (Some(cap), false) = (&retry.max_retry_after, on) {
        errors.error(
            cap.span,
            format!(
                "`max_retry_after = \"{}\"` caps the Retry-After floor, which is off: add `respect_retry_after = true`, or remove `max_retry_after`",
                cap.display()
            ),
        );
    }
}

impl Predicate {
    pub(crate) fn variant(&self) -> &'static str {
        match self {
            Predicate::TransientOnly => "TransientOnly",
            Predicate::TransientOrUnknown => "TransientOrUnknown",
            Predicate::Always => "Always",
            Predicate::Never => "Never",
            Predicate::Custom(_) => "Custom",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn messages(tokens: TokenStream) -> (AegisSpec, Vec<String>) {
        let mut errors = Errors::new();
        let spec = parse_and_validate(tokens, &mut errors);
        let messages = match errors.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        (spec, messages)
    }

    #[test]
    fn parses_the_design_card_example() {
        let (spec, errs) = messages(quote!(
            retry(max = 5),
            timeout(idle = "10s"),
            on_error(route = cancel)
        ));
        assert!(errs.is_empty(), "{errs:?}");
        let retry = spec.retry.unwrap().value;
        assert_eq!(retry.max.unwrap().0, 5);
        assert!(retry.initial.is_none());
        assert_eq!(spec.timeout.unwrap().value.idle.unwrap().millis, 10_000);
        assert!(matches!(
            spec.on_error.unwrap().value,
            Handler::Route { ref to, error_field: None } if to == "cancel"
        ));
        assert!(spec.cache.is_none());
    }

    #[test]
    fn reports_every_mistake_in_one_go() {
        let (_, errs) = messages(quote!(
            retry(max = 0, factor = 0.5, jiter = true),
            timeout(run = "0s", idle = "1.5s"),
            on_error(route = cancel, custom = "x"),
            cache(key = default),
            retyr
        ));
        assert_eq!(errs.len(), 8, "{errs:#?}");
        assert!(errs.iter().any(|e| e.contains("max = 0")));
        assert!(errs.iter().any(|e| e.contains("factor = 0.5")));
        assert!(
            errs.iter()
                .any(|e| e.contains("unknown key `jiter`: did you mean `jitter`?"))
        );
        assert!(errs.iter().any(|e| e.contains("is zero")));
        assert!(errs.iter().any(|e| e.contains("write \"1s500ms\" instead")));
        assert!(
            errs.iter()
                .any(|e| e.contains("already has `route`: remove `custom`"))
        );
        assert!(errs.iter().any(|e| e.contains("`cache` needs a `ttl`")));
        assert!(
            errs.iter()
                .any(|e| e.contains("unknown key `retyr`: did you mean `retry`?"))
        );
    }

    #[test]
    fn checks_across_keys() {
        let (_, errs) = messages(quote!(retry(initial = "90s")));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].contains("the default `max_interval` of \"1m\""),
            "{errs:?}"
        );
        let (_, errs) = messages(quote!(retry(max_interval = "100ms")));
        assert!(
            errs[0].contains("shorter than the default `initial`"),
            "{errs:?}"
        );
        let (spec, errs) = messages(quote!(retry(initial = "0ms", max_interval = "0ms")));
        assert!(
            errs.is_empty(),
            "zero waits are immediate retries: {errs:?}"
        );
        assert_eq!(spec.retry.unwrap().value.initial.unwrap().millis, 0);
        let (_, errs) = messages(quote!(on_error(absorb, error_field = f)));
        assert!(
            errs[0].contains("`error_field` only applies to `route = ..`"),
            "{errs:?}"
        );
        let (_, errs) = messages(quote!(on_error(error_field = f)));
        assert!(errs[0].contains("no handler"), "{errs:?}");
        let (_, errs) = messages(quote!(timeout()));
        assert!(errs[0].contains("sets no bound"), "{errs:?}");
        let (_, errs) = messages(quote!(retry(max = 2), retry(max = 3)));
        assert_eq!(errs, ["`retry` is given twice: keep only one `retry`"]);
    }

    #[test]
    fn parses_the_cache_scope() {
        let (spec, errs) = messages(quote!(cache(ttl = "1m")));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(spec.cache.unwrap().value.scope, Scope::Graph);
        let (spec, errs) = messages(quote!(cache(ttl = "1m", scope = graph)));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(spec.cache.unwrap().value.scope, Scope::Graph);
        let (_, errs) = messages(quote!(cache(ttl = "1m", scope = nodes)));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("unknown cache scope `nodes`: write `graph` (the default"),
            "{errs:?}"
        );
        assert!(errs[0].contains("or `node` ("), "{errs:?}");
        let (_, errs) = messages(quote!(cache(ttl = "1m", scope = "node")));
        assert!(errs[0].contains("`scope` is a bare word"), "{errs:?}");
        let (_, errs) = messages(quote!(cache(ttl = "1m", scope = node, scope = graph)));
        assert_eq!(errs, ["`scope` is given twice: keep only one `scope`"]);
        let (_, errs) = messages(quote!(cache(ttl = "1m", scoep = node)));
        assert!(
            errs[0].contains("unknown key `scoep`: did you mean `scope`?"),
            "{errs:?}"
        );
    }

    #[test]
    fn parses_the_retry_after_floor() {
        let (spec, errs) = messages(quote!(retry(
            respect_retry_after = true,
            max_retry_after = "45s"
        )));
        assert!(errs.is_empty(), "{errs:?}");
        let retry = spec.retry.unwrap().value;
        assert!(retry.respect_retry_after.unwrap().0);
        assert_eq!(retry.max_retry_after.unwrap().millis, 45_000);
        let (_, errs) = messages(quote!(retry(max_retry_after = "45s")));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("which is off"), "{errs:?}");
        let (_, errs) = messages(quote!(retry(
            respect_retry_after = false,
            max_retry_after = "45s"
        )));
        assert!(errs[0].contains("which is off"), "{errs:?}");
        let (_, errs) = messages(quote!(retry(
            respect_retry_after = true,
            max_retry_after = "0s"
        )));
        assert!(errs[0].contains("is zero"), "{errs:?}");
    }

    #[test]
    fn parses_every_value_form() {
        let (spec, errs) = messages(quote!(
            retry(
                max = 4,
                initial = "1s",
                factor = 3,
                max_interval = "1m30s",
                jitter,
                on = "only-429"
            ),
            on_error(absorb(
                summary = "unavailable",
                retries_left = 0,
                tags = ["a", null]
            )),
            cache(ttl = "15m", key = fields(question, locale), scope = node),
            id = "booker",
            crate = "::my::aegis"
        ));
        assert!(errs.is_empty(), "{errs:?}");
        let retry = spec.retry.unwrap().value;
        assert_eq!(retry.factor.unwrap().0, 3.0);
        assert_eq!(retry.max_interval.unwrap().millis, 90_000);
        assert!(retry.jitter.unwrap().0);
        assert!(matches!(retry.on, Some(Predicate::Custom(ref n)) if n == "only-429"));
        let Handler::Absorb(writes) = spec.on_error.unwrap().value else {
            panic!("not absorb")
        };
        assert_eq!(writes.len(), 3);
        let cache = spec.cache.unwrap().value;
        assert_eq!(cache.ttl.millis, 900_000);
        assert!(matches!(cache.key, CacheKey::Fields(ref f) if f.len() == 2));
        assert_eq!(cache.scope, Scope::Node);
        assert_eq!(spec.id.unwrap().0, "booker");
        assert!(spec.krate.is_some());
        for (word, variant) in [
            ("transient", "TransientOnly"),
            ("unknown", "TransientOrUnknown"),
            ("all", "Always"),
            ("never", "Never"),
        ] {
            let word: Ident = syn::parse_str(word).unwrap();
            let (spec, errs) = messages(quote!(retry(on = #word)));
            assert!(errs.is_empty(), "{errs:?}");
            assert_eq!(spec.retry.unwrap().value.on.unwrap().variant(), variant);
        }
    }
}
