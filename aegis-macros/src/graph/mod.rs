//! `graph!`: parse the sections (each item on its own, so one mistake
//! hides no other) → check every cross-reference the tokens show → expand to the builder calls, with each `#[aegis]` function's
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
        Err(errors) => return failed(errors.to_compile_error(), None),
    };
    let checked = check::parse_and_check(parsed);
    match checked.errors.finish() {
        Ok(()) => expand::expand(&checked.graph, &input),
        Err(errors) => {
            let errors = errors.to_compile_error();
            let fn_checks = expand::fn_node_checks(&checked.graph, &input);
            failed(quote!(#errors #fn_checks), checked.graph.krate.as_ref())
        }
    }
}

/// A block, so several `compile_error!`s are statements, ending in a value
/// of graph!'s type: the failed graph! causes no type error, and (unlike a
/// diverging `unreachable!()`) no "unreachable statement" warning on the
/// code after it.
fn failed(errors: TokenStream, krate: Option<&syn::Path>) -> TokenStream {
    let p = crate::attr::private_path(krate);
    quote!({ #errors #p::failed_graph() })
}
