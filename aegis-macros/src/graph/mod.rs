//! `graph!`: parse the sections → check every cross-reference the tokens
//! show → expand to the builder calls.

mod check;
mod expand;
mod parse;

use proc_macro2::TokenStream;

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<parse::GraphInput>(input).and_then(check::check) {
        Ok(graph) => expand::expand(&graph),
        // A block, so several `compile_error!`s are statements, ending in
        // `!` so the failed graph! does not also cause a type error.
        Err(errors) => {
            let errors = errors.to_compile_error();
            quote::quote!({ #errors ::core::unreachable!() })
        }
    }
}
