//! The expression that builds a validated Aegis at run time, through the
//! runtime's `__private` constructors (never its struct literals, so a field
//! added to a policy type does not break generated code).

use proc_macro2::TokenStream;
use quote::quote;

use super::{AegisSpec, CacheKey, Dur, Handler, Predicate, Scope};
use crate::names::name_of;

fn some(value: Option<TokenStream>) -> TokenStream {
    match value {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

fn duration(d: &Dur, p: &TokenStream) -> TokenStream {
    let ms = proc_macro2::Literal::u64_suffixed(d.millis);
    quote!(#p::Duration::from_millis(#ms))
}

/// `#p::aegis(retry, timeout, on_error, cache)`. A route without an
/// `error_field` writes to `default_error_field` (`<node id>_error`).
pub(crate) fn aegis_expr(
    spec: &AegisSpec,
    default_error_field: &str,
    p: &TokenStream,
) -> TokenStream {
    let retry = some(spec.retry.as_ref().map(|r| {
        let r = &r.value;
        let max = some(r.max.map(|m| {
            let m = proc_macro2::Literal::u32_suffixed(m.0);
            quote!(#m)
        }));
        let initial = some(r.initial.as_ref().map(|d| duration(d, p)));
        let factor = some(r.factor.map(|f| {
            let f = proc_macro2::Literal::f64_suffixed(f.0);
            quote!(#f)
        }));
        let max_interval = some(r.max_interval.as_ref().map(|d| duration(d, p)));
        let jitter = some(r.jitter.map(|j| {
            let j = j.0;
            quote!(#j)
        }));
        let on = some(r.on.as_ref().map(|on| match on {
            Predicate::Custom(name) => quote!(#p::custom_predicate(#name)),
            other => {
                let variant = syn::Ident::new(other.variant(), proc_macro2::Span::call_site());
                quote!(#p::RetryPredicate::#variant)
            }
        }));
        let policy = quote!(#p::retry(#max, #initial, #factor, #max_interval, #jitter, #on));
        if r.respect_retry_after.is_none() && r.max_retry_after.is_none() {
            return policy;
        }
        let respect = some(r.respect_retry_after.map(|b| {
            let b = b.0;
            quote!(#b)
        }));
        let cap = some(r.max_retry_after.as_ref().map(|d| duration(d, p)));
        quote!(#p::retry_after_floor(#policy, #respect, #cap))
    }));

    let timeout = some(spec.timeout.as_ref().map(|t| {
        let run = some(t.value.run.as_ref().map(|d| duration(d, p)));
        let idle = some(t.value.idle.as_ref().map(|d| duration(d, p)));
        let first_chunk = some(t.value.first_chunk.as_ref().map(|d| duration(d, p)));
        quote!(#p::timeout(#run, #idle, #first_chunk))
    }));

    let on_error = some(spec.on_error.as_ref().map(|h| match &h.value {
        Handler::Route { to, error_field } => {
            let to = name_of(to);
            let field = error_field
                .as_ref()
                .map_or_else(|| default_error_field.to_string(), name_of);
            quote!(#p::route(#to, #field))
        }
        Handler::Absorb(writes) => {
            let writes = writes.iter().map(|(field, value)| {
                let field = name_of(field);
                let value = value.to_value_tokens(p);
                quote!((#field, #value))
            });
            quote!(#p::absorb(::std::vec![#(#writes),*]))
        }
        Handler::Custom(name) => quote!(#p::custom_handler(#name)),
    }));

    let cache = some(spec.cache.as_ref().map(|c| {
        let ttl = duration(&c.value.ttl, p);
        let fields = some(match &c.value.key {
            CacheKey::Default => None,
            CacheKey::Fields(fields) => {
                let names = fields.iter().map(name_of);
                Some(quote!(&[#(#names),*]))
            }
        });
        let fallback_results = c.value.fallback_results;
        let policy = quote!(#p::cache(#ttl, #fields, #fallback_results));
        match c.value.scope {
            Scope::Graph => policy,
            Scope::Node => quote!(#p::node_scoped(#policy)),
        }
    }));

    quote!(#p::aegis(#retry, #timeout, #on_error, #cache))
}
