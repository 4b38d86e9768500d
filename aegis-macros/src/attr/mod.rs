//! `#[aegis(..)]`: parse the policy and the function, validate both, and
//! expand to the function as written plus its node marker and descriptor.
//!
//! A mistake is reported and the marker, its impl and the descriptor are
//! still emitted (as thiserror's and tokio's macros keep their item), so
//! `add_aegis_node(book {})` and `graph! { nodes { book } }` elsewhere do not
//! turn into errors of their own: one mistake, one error, in rustc and in
//! an IDE alike.

mod descriptor;
mod signature;

pub(crate) use descriptor::crate_site;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{FnArg, ItemFn};

use crate::errors::Errors;
use crate::names::{STD_MACROS, field_name_problem, name_of};
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
    let spec = policy::parse_and_validate(args.clone(), &mut errors);
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
    // attributes, so the second #[aegis] emits the marker: this one must not.
    let given_twice = func
        .attrs
        .iter()
        .find(|a| a.path().segments.last().is_some_and(|s| s.ident == "aegis"));
    if let Some(again) = given_twice {
        errors.error(
            again.pound_token.span,
            "#[aegis] is given twice on this function: merge the two into one `#[aegis(..)]`",
        );
    }
    let fn_name = name_of(&func.sig.ident);
    // The descriptor is a macro named like the function, which would
    // shadow the standard macro in this module and wherever the module is
    // glob-imported (`use super::*;`): `write!` would stop working there.
    let shadows_std = STD_MACROS.contains(&fn_name.as_str());
    if shadows_std {
        errors.error(
            func.sig.ident.span(),
            format!(
                "an #[aegis] function cannot be named `{fn_name}`: #[aegis] gives it a hidden macro of the same name, for graph!, which would shadow the standard `{fn_name}!` here and wherever this module is glob-imported; rename the function (e.g. `{fn_name}_node`), and keep `{fn_name}` as the node id with `#[aegis(id = \"{fn_name}\")]`"
            ),
        );
    }
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

    let valid = errors.is_empty();
    // A method's marker could not live in its `impl` block.
    let is_method = func
        .sig
        .inputs
        .iter()
        .any(|a| matches!(a, FnArg::Receiver(_)));
    let mut out = quote! {
        // The node contract makes the function async whether or not its
        // body awaits; clippy's advice to drop `async` would break it.
        #[allow(clippy::unused_async)]
        #func
    };
    if given_twice.is_none() && !is_method {
        let cfgs: Vec<_> = func
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("cfg"))
            .collect();
        // With a mistake in the attribute, the marker carries no Aegis; with
        // one in the signature, its `run` does not call the function.
        let aegis = valid.then_some((&spec, default_error_field.as_str()));
        let takes_deps = signature::takes_deps(&func);
        // What node cache keys cover of the function's code: its tokens as
        // written, not as syn prints them back (which a syn release may
        // change).
        let code_version = crate::digest::code_digest(item);
        out.extend(node_marker(
            &func,
            &spec,
            aegis,
            (&id, &code_version),
            spans.as_ref(),
            takes_deps,
            &cfgs,
        ));
        if !shadows_std {
            out.extend(descriptor::descriptor(
                &func, &args, valid, takes_deps, &cfgs,
            ));
        }
    }
    out.extend(errors.finish().err().map(|e| e.to_compile_error()));
    out
}

/// The item unchanged (so its other uses still resolve) and the errors.
fn with_errors(item: TokenStream, errors: Errors) -> TokenStream {
    let errors = errors.finish().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}

/// The marker struct and its `AegisNodeFn` impl, or for a function taking
/// a dependency its `AegisDepsFn` impl and `with`. `aegis` is the validated
/// spec and default error field, `None` after a mistake in the attribute;
/// `id` comes with the code digest; `spans` is `None` after a mistake in
/// the signature.
fn node_marker(
    func: &ItemFn,
    spec: &AegisSpec,
    aegis: Option<(&AegisSpec, &str)>,
    (id, code_version): (&str, &str),
    spans: Option<&signature::ArgSpans>,
    takes_deps: bool,
    cfgs: &[&syn::Attribute],
) -> TokenStream {
    let p = private_path(spec.krate.as_ref().map(|(path, _)| path));
    let vis = &func.vis;
    let name = &func.sig.ident;
    let aegis = match aegis {
        Some((spec, default_error_field)) => aegis_expr(spec, default_error_field, &p),
        None => quote!(#p::aegis(
            ::core::option::Option::None,
            ::core::option::Option::None,
            ::core::option::Option::None,
            ::core::option::Option::None,
        )),
    };

    // Our bindings: mixed-site (hygienic) and unlikely names, so a user's
    // `const state` or local cannot capture them.
    let state = format_ident!("__aegis_state", span = Span::mixed_site());
    let ctx = format_ident!("__aegis_ctx", span = Span::mixed_site());
    let deps = format_ident!("__aegis_deps", span = Span::mixed_site());
    let body = match spans {
        Some(spans) => call(name, takes_deps.then_some(&deps), &state, &ctx, spans, &p),
        // Never run: the crate does not compile.
        None => {
            let deps = takes_deps.then(|| quote!(#deps,));
            quote! {
                let _ = (#deps #state, #ctx);
                ::core::result::Result::Err(#p::StateNodeError::permanent(
                    "this node's #[aegis] function did not compile",
                ))
            }
        }
    };

    let marker = quote! {
        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code)]
        #[doc(hidden)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #name {}
    };
    if takes_deps {
        return deps_marker(
            marker,
            name,
            vis,
            spans.and_then(|s| s.deps.as_ref()),
            (&aegis, (id, code_version), &deps, &state, &ctx, &body),
            cfgs,
            &p,
        );
    }

    quote! {
        #marker

        #(#cfgs)*
        impl #p::AegisNodeFn for #name {
            const ID: &'static str = #id;
            // The id, not the module path: moving the function to another
            // module must not change the graph fingerprint.
            const KIND: &'static str = #id;
            // The digest of the function's tokens: its cache keys' code.
            const CODE_VERSION: ::core::option::Option<&'static str> =
                ::core::option::Option::Some(#code_version);

            fn aegis() -> #p::Aegis {
                #aegis
            }

            fn run<'__aegis>(
                #state: &'__aegis #p::Battlefield,
                #ctx: &'__aegis #p::NodeContext,
            ) -> #p::BoxFuture<'__aegis, ::core::result::Result<#p::Directive, #p::StateNodeError>> {
                ::std::boxed::Box::pin(async move { #body })
            }
        }
    }
}

/// The marker's `AegisDepsFn` impl and its `with(instance)`. `deps_ty` is
/// `None` after a mistake in the signature: the marker then takes any
/// instance and holds `()`, so graph! and builders naming it add no error
/// of their own.
fn deps_marker(
    marker: TokenStream,
    name: &syn::Ident,
    vis: &syn::Visibility,
    deps_ty: Option<&syn::Type>,
    (aegis, (id, code_version), deps, state, ctx, body): (
        &TokenStream,
        (&str, &str),
        &syn::Ident,
        &syn::Ident,
        &syn::Ident,
        &TokenStream,
    ),
    cfgs: &[&syn::Attribute],
    p: &TokenStream,
) -> TokenStream {
    let instance = format_ident!("__aegis_instance", span = Span::mixed_site());
    let (deps_ty, with) = match deps_ty {
        // The user's tokens, so "`Rc<..>` cannot be shared between
        // threads" points at their type.
        Some(ty) => {
            let with = quote! {
                #vis fn with(
                    #instance: impl ::core::convert::Into<::std::sync::Arc<#ty>>,
                ) -> #p::AegisDepsNode<#name> {
                    #p::AegisDepsNode::new(#instance)
                }
            };
            (quote!(#ty), with)
        }
        None => {
            let with = quote! {
                #vis fn with<__AegisAny>(#instance: __AegisAny) -> #p::AegisDepsNode<#name> {
                    let _ = #instance;
                    #p::AegisDepsNode::new(())
                }
            };
            (quote!(()), with)
        }
    };
    let doc = format!(
        "The node `{id}` holding its dependency: add it with `graph.add_aegis_node({name}::with(instance))`, or declare `{name}(instance)` in `graph!`. Takes the instance or an `Arc` of it."
    );
    quote! {
        #marker

        #(#cfgs)*
        impl #name {
            #[doc = #doc]
            #[allow(dead_code)]
            #with
        }

        #(#cfgs)*
        impl #p::AegisDepsFn for #name {
            type Deps = #deps_ty;
            const ID: &'static str = #id;
            // The id, not the module path nor the instance: neither is part
            // of the graph fingerprint.
            const KIND: &'static str = #id;
            // The digest of the function's tokens: its cache keys' code.
            const CODE_VERSION: ::core::option::Option<&'static str> =
                ::core::option::Option::Some(#code_version);

            fn aegis() -> #p::Aegis {
                #aegis
            }

            fn run<'__aegis>(
                #deps: &'__aegis Self::Deps,
                #state: &'__aegis #p::Battlefield,
                #ctx: &'__aegis #p::NodeContext,
            ) -> #p::BoxFuture<'__aegis, ::core::result::Result<#p::Directive, #p::StateNodeError>> {
                ::std::boxed::Box::pin(async move { #body })
            }
        }
    }
}

/// The call of the function, with its result converted for the engine.
/// The arguments are located at the user's argument types, and the
/// conversion at the return type, so a type mismatch points there.
fn call(
    name: &syn::Ident,
    deps: Option<&syn::Ident>,
    state: &syn::Ident,
    ctx: &syn::Ident,
    spans: &signature::ArgSpans,
    p: &TokenStream,
) -> TokenStream {
    let state_arg = format_ident!("{}", state, span = state.span().located_at(spans.state));
    let ctx_arg = format_ident!("{}", ctx, span = ctx.span().located_at(spans.ctx));
    let result = format_ident!("__aegis_result", span = Span::mixed_site());
    let result_at_output = format_ident!(
        "__aegis_result",
        span = Span::mixed_site().located_at(spans.output)
    );
    let convert =
        quote_spanned!(spans.output=> #p::NodeReturn::into_node_result(#result_at_output));
    let deps = deps.map(|d| quote!(#d,));
    quote! {
        let #result = #name(#deps #state_arg, #ctx_arg).await;
        #convert
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(args: TokenStream, item: TokenStream) -> String {
        expand(args, item).to_string()
    }

    #[test]
    fn a_valid_function_gets_its_marker_and_descriptor() {
        let out = expanded(
            quote!(retry(max = 2)),
            quote!(
                pub async fn book(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("pub struct book { }"), "{out}");
        assert!(out.contains("# [macro_export]"), "{out}");
        assert!(out.contains("macro_rules ! __aegis_node_book_"), "{out}");
        assert!(out.contains("pub use __aegis_node_book_"), "{out}");
        assert!(out.contains("as book ;"), "{out}");
        // The attribute's tokens, for graph! to read, after "valid" and
        // "takes no dependency".
        assert!(out.contains("true false { retry (max = 2) }"), "{out}");
        assert!(
            out.contains("book (__aegis_state , __aegis_ctx) . await"),
            "{out}"
        );
        assert!(
            out.contains("const CODE_VERSION : :: core :: option :: Option < & 'static str > = :: core :: option :: Option :: Some (\""),
            "{out}"
        );
    }

    /// The digest in the marker: a changed body gives another one, a
    /// doc comment does not.
    fn code_version_of(item: TokenStream) -> String {
        let out = expanded(quote!(cache(ttl = "1m")), item);
        let start = out.find("Option :: Some (\"").unwrap() + "Option :: Some (\"".len();
        out[start..start + 32].to_string()
    }

    #[test]
    fn the_marker_carries_the_code_digest() {
        let v1 = code_version_of(quote!(
            async fn answer(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                answer_v1(s)
            }
        ));
        let documented = code_version_of(quote!(
            /// Answers.
            async fn answer(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                answer_v1(s)
            }
        ));
        let v2 = code_version_of(quote!(
            async fn answer(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                answer_v2(s)
            }
        ));
        assert_eq!(v1, documented);
        assert_ne!(v1, v2);
        assert_eq!(
            v1,
            crate::digest::code_digest(quote!(
                async fn answer(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    answer_v1(s)
                }
            ))
        );
    }

    #[test]
    fn a_mistake_keeps_the_marker_and_descriptor_and_reports_once() {
        let out = expanded(
            quote!(retry(max = 0)),
            quote!(
                async fn book(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("struct book { }"), "{out}");
        assert!(
            out.contains("impl :: aegis :: __private :: AegisNodeFn for book"),
            "{out}"
        );
        // No Aegis, and no tokens for graph! to check.
        assert!(out.contains("false { }"), "{out}");
        assert!(
            out.contains(":: aegis :: __private :: aegis (:: core :: option :: Option :: None"),
            "{out}"
        );

        // A mistake in the signature: the marker does not call the function.
        let out = expanded(
            quote!(),
            quote!(
                fn book(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("struct book { }"), "{out}");
        assert!(!out.contains(". await"), "{out}");
        assert!(out.contains("StateNodeError :: permanent"), "{out}");
    }

    #[test]
    fn no_second_marker_for_a_repeated_attribute_nor_any_for_a_method() {
        let out = expanded(
            quote!(),
            quote!(
                #[aegis(retry)]
                async fn book(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            !out.contains("struct book"),
            "the second #[aegis] emits it: {out}"
        );
        let out = expanded(
            quote!(),
            quote!(
                async fn book(&self, s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert!(!out.contains("struct book"), "{out}");
        assert!(!out.contains("macro_rules"), "{out}");
    }

    #[test]
    fn a_function_taking_a_dependency_gets_a_deps_marker_and_with() {
        let out = expanded(
            quote!(retry(max = 2)),
            quote!(
                pub async fn answer(
                    client: &Researcher,
                    s: &Battlefield,
                    c: &NodeContext,
                ) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("pub struct answer { }"), "{out}");
        assert!(
            out.contains("impl :: aegis :: __private :: AegisDepsFn for answer"),
            "{out}"
        );
        assert!(!out.contains("AegisNodeFn for"), "{out}");
        assert!(out.contains("type Deps = Researcher ;"), "{out}");
        assert!(
            out.contains("pub fn with (__aegis_instance : impl :: core :: convert :: Into < :: std :: sync :: Arc < Researcher >>"),
            "{out}"
        );
        assert!(
            out.contains("answer (__aegis_deps , __aegis_state , __aegis_ctx) . await"),
            "{out}"
        );
        // graph! learns that the function takes a dependency.
        assert!(out.contains("true true { retry (max = 2) }"), "{out}");
    }

    #[test]
    fn a_broken_dependency_keeps_a_marker_taking_any_instance() {
        for deps in [
            quote!(client: Researcher),
            quote!(client: &mut Researcher),
            quote!(client: &impl Ask),
            quote!(client: &Client<'a>),
        ] {
            let out = expanded(
                quote!(),
                quote!(
                    async fn answer(#deps, s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                        todo!()
                    }
                ),
            );
            assert_eq!(out.matches("compile_error").count(), 1, "{out}");
            assert!(out.contains("type Deps = () ;"), "{out}");
            assert!(out.contains("fn with < __AegisAny >"), "{out}");
            assert!(!out.contains(". await"), "{out}");
            // Not valid, so graph! checks nothing, but knows the shape.
            assert!(out.contains("false true { }"), "{out}");
        }
    }

    #[test]
    fn a_function_named_like_a_std_macro_gets_no_descriptor() {
        let out = expanded(
            quote!(),
            quote!(
                async fn write(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                    todo!()
                }
            ),
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("cannot be named `write`"), "{out}");
        assert!(out.contains("struct write { }"), "{out}");
        assert!(!out.contains("macro_rules"), "{out}");
    }

    #[test]
    fn a_descriptor_name_is_deterministic() {
        // (Two `book`s in one crate get two names: the hash covers the
        // span's position, which only the compiler's spans carry; see
        // `ui-tests/pass/graph_descriptors.rs`.)
        let item = quote!(
            async fn book(s: &Battlefield, c: &NodeContext) -> Result<StateDelta, E> {
                todo!()
            }
        );
        let name = |out: String| {
            let start = out.find("__aegis_node_book_").unwrap();
            out[start..start + 34].to_string()
        };
        assert_eq!(
            name(expanded(quote!(), item.clone())),
            name(expanded(quote!(), item))
        );
    }
}
