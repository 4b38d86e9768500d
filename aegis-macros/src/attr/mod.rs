//! `#[aegis(..)]`: parse the policy and the function, validate both, and
//! expand to the function as written plus its node marker.

mod check;
mod signature;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;

use crate::errors::Errors;
use crate::names::{field_name_problem, name_of};
use crate::policy::{self, AegisSpec, Handler, aegis_expr};

/// The path generated code names the runtime through.
pub(crate) fn private_path(krate: Option<&syn::Path>) -> TokenStream {
    match krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::aegis::__private),
    }
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::new();
    let spec = policy::parse_and_validate(args, &mut errors);
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let span = item
                .clone()
                .into_iter()
                .next()
                .map_or_else(Span::call_site, |t| t.span());
            errors.error(
                span,
                "#[aegis] goes on a node function: `async fn name(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError>`",
            );
            return with_errors(item, errors);
        }
    };
    let spans = signature::check(&func, &mut errors);
    // The attribute expands first and re-emits the function with its other
    // attributes, so a second #[aegis] would emit a second marker.
    if let Some(again) = func
        .attrs
        .iter()
        .find(|a| a.path().segments.last().is_some_and(|s| s.ident == "aegis"))
    {
        errors.error(
            again.pound_token.span,
            "#[aegis] is given twice on this function: merge the two into one `#[aegis(..)]`",
        );
    }
    let fn_name = name_of(&func.sig.ident);
    let id = spec
        .id
        .as_ref()
        .map_or_else(|| fn_name.clone(), |(id, ..)| id.clone());
    let default_error_field = format!("{id}_error");
    if let Some(k) = &spec.on_error
        && let Handler::Route {
            error_field: None, ..
        } = &k.value
        && let Some(problem) = field_name_problem(&default_error_field)
    {
        errors.error(
            k.key,
            format!(
                "the route's error field defaults to `{default_error_field}`, which is not a valid field name ({problem}): set `error_field = ..`"
            ),
        );
    }
    match spans {
        Some(spans) if errors.is_empty() => {
            node_marker(&func, &spec, &id, &default_error_field, &spans)
        }
        _ => with_errors(quote!(#func), errors),
    }
}

/// The item unchanged (so its other uses still resolve) and the errors.
fn with_errors(item: TokenStream, errors: Errors) -> TokenStream {
    let errors = errors.finish().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}

fn node_marker(
    func: &ItemFn,
    spec: &AegisSpec,
    id: &str,
    default_error_field: &str,
    spans: &signature::ArgSpans,
) -> TokenStream {
    let p = private_path(spec.krate.as_ref().map(|(path, _)| path));
    let vis = &func.vis;
    let name = &func.sig.ident;
    let name_str = name_of(name);
    let cfgs: Vec<_> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .collect();
    let aegis = aegis_expr(spec, default_error_field, &p);
    let check = check::check_fn(spec, &name_str, id, default_error_field, vis, &p);

    // Our bindings: mixed-site (hygienic) and unlikely names, so a user's
    // `const state` or local cannot capture them; located at the user's
    // argument types so a type mismatch points there.
    let state = format_ident!("__aegis_state", span = Span::mixed_site());
    let ctx = format_ident!("__aegis_ctx", span = Span::mixed_site());
    let state_arg = format_ident!(
        "__aegis_state",
        span = Span::mixed_site().located_at(spans.state)
    );
    let ctx_arg = format_ident!(
        "__aegis_ctx",
        span = Span::mixed_site().located_at(spans.ctx)
    );
    let result = format_ident!("__aegis_result", span = Span::mixed_site());
    let result_at_output = format_ident!(
        "__aegis_result",
        span = Span::mixed_site().located_at(spans.output)
    );
    let convert =
        quote_spanned!(spans.output=> #p::NodeReturn::into_node_result(#result_at_output));
    let call = quote! {
        let #result = #name(#state_arg, #ctx_arg).await;
        #convert
    };

    quote! {
        // The node contract makes the function async whether or not its
        // body awaits; clippy's advice to drop `async` would break it.
        #[allow(clippy::unused_async)]
        #func

        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code)]
        #[doc(hidden)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #name {}

        #(#cfgs)*
        impl #p::AegisNodeFn for #name {
            const ID: &'static str = #id;
            const KIND: &'static str = ::core::concat!(::core::module_path!(), "::", #name_str);

            fn aegis() -> #p::Aegis {
                #aegis
            }

            fn run<'__aegis>(
                #state: &'__aegis #p::Battlefield,
                #ctx: &'__aegis #p::NodeContext,
            ) -> #p::BoxFuture<'__aegis, ::core::result::Result<#p::Directive, #p::StateNodeError>> {
                ::std::boxed::Box::pin(async move { #call })
            }
        }

        #(#cfgs)*
        impl #name {
            #check
        }
    }
}
