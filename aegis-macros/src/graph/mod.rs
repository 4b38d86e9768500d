//! `graph!`: parse the sections → check every cross-reference the tokens
//! show → expand to the builder calls, with each `#[aegis]` function's
//! attribute checked against the graph through its descriptor
//! ([`node_fn`]).

mod check;
mod expand;
mod node_fn;
mod parse;

use proc_macro2::TokenStream;
use quote::quote;

pub(crate) use node_fn::expand as expand_fn_node;

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let parsed = match syn::parse2::<parse::GraphInput>(input.clone()) {
        Ok(parsed) => parsed,
        Err(errors) => return failed(errors.to_compile_error()),
    };
    let checked = check::check(parsed);
    match checked.errors.finish() {
        Ok(()) => expand::expand(&checked.graph, &input),
        Err(errors) => {
            let errors = errors.to_compile_error();
            let fn_checks = expand::fn_node_checks(&checked.graph, &input);
            failed(quote!(#errors #fn_checks))
        }
    }
}

/// A block, so several `compile_error!`s are statements, ending in `!` so
/// the failed graph! does not also cause a type error.
fn failed(errors: TokenStream) -> TokenStream {
    quote!({ #errors ::core::unreachable!() })
}
