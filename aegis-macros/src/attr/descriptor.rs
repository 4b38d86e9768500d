//! The descriptor macro: how `graph!` reads an `#[aegis]` function's
//! attribute.
//!
//! The attribute and `graph!` are separate macro invocations, often in
//! separate modules or crates, and neither sees the other's tokens. So the
//! attribute also defines a `macro_rules!` named like the function (macros
//! live in their own namespace, beside the function and its marker struct,
//! and `use nodes::book;` imports all three), carrying the attribute's
//! tokens with their spans. `graph!` invokes it with a callback and its own
//! input; it calls the callback, `__graph_node!`, with both, and that proc
//! macro checks the one against the other and reports a plain error at the
//! offending token (see `graph::node_fn`).
//!
//! The `macro_rules!` itself is `#[macro_export]`ed under a hidden,
//! crate-unique name, so a node from another crate works too, and
//! re-exported under the function's name with the function's visibility.

use std::hash::{DefaultHasher, Hash, Hasher};

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, ItemFn};

use crate::names::name_of;

/// Which crate is being compiled, as Cargo names it (a package's library
/// and binary share a crate name, so the binary's name is added). Equal
/// markers on the descriptor and in `graph!` mean the function is in the
/// crate the graph is.
pub(crate) fn crate_site() -> String {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    format!("{}/{}", var("CARGO_CRATE_NAME"), var("CARGO_BIN_NAME"))
}

/// The `macro_rules!` and its re-export. `valid` is whether the attribute
/// and the signature passed their own checks: if not, the attribute has
/// reported the error, and `graph!` adds the node without checking it
/// (one mistake, one error). `takes_deps` is whether the function takes a
/// dependency, which `graph!` must then give it.
pub(crate) fn descriptor(
    func: &ItemFn,
    args: &TokenStream,
    valid: bool,
    takes_deps: bool,
    cfgs: &[&Attribute],
) -> TokenStream {
    let name = &func.sig.ident;
    let vis = &func.vis;
    let site = crate_site();
    let hidden = format_ident!(
        "__aegis_node_{}_{:016x}",
        name_of(name),
        unique(func, &site)
    );
    // Tokens of a broken attribute might not even survive a `macro_rules!`
    // body; `graph!` does not read them anyway.
    let args = if valid {
        args.clone()
    } else {
        TokenStream::new()
    };
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[macro_export]
        #[allow(non_local_definitions)]
        macro_rules! #hidden {
            ([$($callback:tt)*] $($graph:tt)*) => {
                $($callback)*! { $($graph)* #site #name #valid #takes_deps { #args } }
            };
        }

        #(#cfgs)*
        #[doc(hidden)]
        #[allow(unused_imports)]
        #vis use #hidden as #name;
    }
}

/// A hash telling this function's descriptor from every other one in the
/// crate: `#[macro_export]` puts them all at the crate root. The span's
/// debug form is its position in the compilation and its expansion, so two
/// `book`s in two modules, or from two expansions of one `macro_rules!`,
/// differ.
fn unique(func: &ItemFn, site: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    site.hash(&mut hasher);
    name_of(&func.sig.ident).hash(&mut hasher);
    format!("{:?}", func.sig.ident.span()).hash(&mut hasher);
    hasher.finish()
}
