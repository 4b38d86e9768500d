//! The compile-time check of the names an `#[aegis]` attribute uses against
//! the graph that declares its node.
//!
//! The attribute cannot see the graph and `graph!` cannot see the
//! attribute, so the attribute emits a `const fn` holding its names and
//! `graph!` calls it in a `const` item with what it declared. A failed check
//! is a compile error whose message is written here, in full, naming the
//! node and the offending name, and whose note points at the offending
//! token in the attribute. (A trait bound with `on_unimplemented` would
//! print the name through a marker type's path, which collides with the
//! same-named node marker of the route target and turns `cancel` into
//! `_::cancel`.)

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use crate::names::name_of;
use crate::policy::{AegisSpec, CacheKey, Handler};

fn fail(span: Span, message: &str) -> TokenStream {
    quote_spanned!(span=> ::core::panic!("{}", #message))
}

fn is_identifier(id: &str) -> bool {
    syn::parse_str::<syn::Ident>(id).is_ok()
}

/// `const fn __aegis_check(facts, graph_id, overridden, worker)`.
pub(crate) fn check_fn(
    spec: &AegisSpec,
    fn_name: &str,
    id: &str,
    default_error_field: &str,
    vis: &syn::Visibility,
    p: &TokenStream,
) -> TokenStream {
    let facts = format_ident!("__aegis_facts", span = Span::mixed_site());
    let graph_id = format_ident!("__aegis_graph_id", span = Span::mixed_site());
    let overridden = format_ident!("__aegis_overridden", span = Span::mixed_site());
    let worker = format_ident!("__aegis_worker", span = Span::mixed_site());

    let id_span = spec
        .id
        .as_ref()
        .map_or_else(Span::call_site, |(_, lit, _)| *lit);
    let id_message = if spec.id.is_none() {
        format!(
            "graph! declares the function `{fn_name}` under another name, but its node id is `{id}`: declare it as plain `{fn_name}`, or give it `#[aegis(id = \"..\")]`"
        )
    } else if is_identifier(id) {
        format!(
            "the function `{fn_name}` is the node `{id}` (its #[aegis] sets `id = \"{id}\"`), and graph! names nodes by id: declare it as `{id} = {fn_name}`"
        )
    } else {
        format!(
            "the function `{fn_name}` is the node `{id}` (its #[aegis] sets the id), which is not an identifier graph! can name: use an identifier id, or add it with `WarGraph::add_aegis_node`"
        )
    };
    let id_fail = fail(id_span, &id_message);

    let mut checks = Vec::new();
    if let Some(k) = &spec.on_error {
        match &k.value {
            Handler::Route { to, error_field } => {
                let target = name_of(to);
                checks.push(fail_if(
                    quote!(#worker),
                    fail(
                        k.key,
                        &format!(
                            "`{fn_name}` is declared a worker template, and its #[aegis] routes failures to `{target}`: a mustered task cannot be routed, so use `on_error(absorb(..))` or a custom handler, or handle the failure at the aggregator"
                        ),
                    ),
                ));
                checks.push(fail_if(
                    quote!(!#p::contains(#facts.nodes, #target)),
                    fail(
                        to.span(),
                        &format!(
                            "route target `{target}` (in the #[aegis] of `{fn_name}`) is not a node of this graph: declare `{target}` in graph!'s `nodes {{ .. }}`, or route to a node it declares"
                        ),
                    ),
                ));
                checks.push(fail_if(
                    quote!(#p::contains(#facts.workers, #target)),
                    fail(
                        to.span(),
                        &format!(
                            "route target `{target}` (in the #[aegis] of `{fn_name}`) is a worker template, which runs only as mustered tasks: route to a regular node"
                        ),
                    ),
                ));
                let (field, span, undeclared) = match error_field {
                    Some(f) => (
                        name_of(f),
                        f.span(),
                        format!(
                            "error field `{}` (in the #[aegis] of `{fn_name}`) is not in this graph's schema: declare it, e.g. `{}: LastWrite`",
                            name_of(f),
                            name_of(f)
                        ),
                    ),
                    None => (
                        default_error_field.to_string(),
                        k.key,
                        format!(
                            "`{fn_name}` routes its error to `{default_error_field}` (the default `<node id>_error`), which this graph's schema does not declare: add `{default_error_field}: LastWrite` to `schema {{ .. }}`, or set `error_field = ..` in its #[aegis]"
                        ),
                    ),
                };
                let undeclared = fail(span, &undeclared);
                let sum = fail(
                    span,
                    &format!(
                        "error field `{field}` of `{fn_name}` is declared `Sum`, and a serialised error cannot be summed: declare it `LastWrite`, `Append` or `Merge`"
                    ),
                );
                checks.push(quote! {
                    match #p::field_is_sum(#facts.fields, #field) {
                        ::core::option::Option::None => #undeclared,
                        ::core::option::Option::Some(true) => #sum,
                        ::core::option::Option::Some(false) => {}
                    }
                });
            }
            Handler::Absorb(writes) => {
                for (field, _) in writes {
                    let name = name_of(field);
                    checks.push(undeclared_field(
                        &facts,
                        &name,
                        fail(
                            field.span(),
                            &format!(
                                "`{name}`, written by the absorb handler of `{fn_name}`, is not in this graph's schema: declare it, or remove it from `absorb(..)`"
                            ),
                        ),
                        p,
                    ));
                }
            }
            Handler::Custom(_) => {}
        }
    }
    if let Some(k) = &spec.cache
        && let CacheKey::Fields(fields) = &k.value.key
    {
        for field in fields {
            let name = name_of(field);
            checks.push(undeclared_field(
                &facts,
                &name,
                fail(
                    field.span(),
                    &format!(
                        "cache key field `{name}` (in the #[aegis] of `{fn_name}`) is not in this graph's schema: declare it, or remove it from `fields(..)`"
                    ),
                ),
                p,
            ));
        }
    }

    quote! {
        #[doc(hidden)]
        #[allow(unused_variables, dead_code, clippy::missing_panics_doc)]
        #vis const fn __aegis_check(
            #facts: &#p::GraphFacts<'_>,
            #graph_id: &str,
            #overridden: bool,
            #worker: bool,
        ) {
            if !#p::str_eq(#graph_id, #id) {
                #id_fail
            }
            // graph! overrode this node's Aegis, so the attribute's names
            // are not used: graph! checks the override itself.
            if #overridden {
                return;
            }
            #(#checks)*
        }
    }
}

fn fail_if(condition: TokenStream, fail: TokenStream) -> TokenStream {
    quote!(if #condition { #fail })
}

fn undeclared_field(
    facts: &syn::Ident,
    name: &str,
    fail: TokenStream,
    p: &TokenStream,
) -> TokenStream {
    quote! {
        if #p::field_is_sum(#facts.fields, #name).is_none() {
            #fail
        }
    }
}
