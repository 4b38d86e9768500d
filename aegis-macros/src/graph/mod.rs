//! `graph!`: parse the sections → check every cross-reference the tokens
//! show → expand to the builder calls.

mod check;
mod expand;
mod parse;

use proc_macro2::TokenStream;

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<parse::GraphInput>(input).and_then(check::check) {
        Ok(graph) => expand::expand(&graph),
        Err(errors) => errors.to_compile_error(),
    }
}
