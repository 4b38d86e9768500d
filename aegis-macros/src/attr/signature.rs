//! What an `#[aegis]` function must look like:
//! `async fn name(state: &Battlefield, ctx: &NodeContext) -> Result<T, E>`,
//! or with a dependency first,
//! `async fn name(deps: &T, state: &Battlefield, ctx: &NodeContext) -> Result<T, E>`.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::{FnArg, GenericParam, ItemFn, ReturnType, Signature, Type};

use crate::errors::Errors;

const SHAPE: &str =
    "async fn name(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError>";

const SHAPE_WITH_DEPS: &str = "async fn name(deps: &MyClient, state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError>";

/// The spans of the argument types, for pointing type errors at them.
pub(crate) struct ArgSpans {
    /// The dependency's type (`T` of `deps: &T`), when the function takes one.
    pub(crate) deps: Option<Type>,
    pub(crate) state: Span,
    pub(crate) ctx: Span,
    pub(crate) output: Span,
}

/// Checks the signature, reporting every problem; `None` if the function
/// cannot be called as a node.
pub(crate) fn check(func: &ItemFn, errors: &mut Errors) -> Option<ArgSpans> {
    let sig: &Signature = &func.sig;
    let before = errors.len();

    if sig.asyncness.is_none() {
        errors.error(
            sig.fn_token.span,
            format!("#[aegis] needs an `async fn`: write `{SHAPE}`"),
        );
    }
    if let Some(c) = &sig.constness {
        errors.error(
            c.span,
            "an #[aegis] node function cannot be `const`: remove `const`",
        );
    }
    if let Some(u) = &sig.unsafety {
        errors.error(
            u.span,
            "an #[aegis] node function cannot be `unsafe`: the engine calls it like any node; make it safe and use `unsafe` blocks inside",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.error(
            abi.span(),
            "an #[aegis] node function cannot be `extern`: remove the ABI",
        );
    }
    for param in &sig.generics.params {
        if !matches!(param, GenericParam::Lifetime(_)) {
            errors.error(
                param.span(),
                "an #[aegis] node function cannot be generic: a node is one concrete function, so remove this parameter and name concrete types",
            );
        }
    }
    if let Some(variadic) = &sig.variadic {
        errors.error(
            variadic.span(),
            format!("an #[aegis] node function takes no variadic arguments: write `{SHAPE}`"),
        );
    }

    let mut types: Vec<&Type> = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(r) => errors.error(
                r.self_token.span,
                "#[aegis] goes on a free function, not a method: remove `self` and take `(state: &Battlefield, ctx: &NodeContext)`",
            ),
            FnArg::Typed(t) => types.push(&t.ty),
        }
    }
    let receivers = sig.inputs.len() - types.len();
    if receivers == 0 && !matches!(types.len(), 2 | 3) {
        errors.error(
            if sig.inputs.is_empty() { sig.paren_token.span.join() } else { sig.inputs.span() },
            format!(
                "an #[aegis] node function takes two arguments, `(state: &Battlefield, ctx: &NodeContext)`, or three with a dependency first, `(deps: &MyClient, state: &Battlefield, ctx: &NodeContext)`, and this one takes {}: write `{SHAPE}` or `{SHAPE_WITH_DEPS}`",
                types.len()
            ),
        );
    }
    let deps = if receivers == 0 && types.len() == 3 {
        if let Some(misplaced) = engine_type_first(types[0]) {
            errors.push(syn::Error::new_spanned(
                types[0],
                format!(
                    "the dependency comes first, before `state` and `ctx`, and this function takes `&{misplaced}` first: write `{SHAPE_WITH_DEPS}`"
                ),
            ));
            types.remove(0);
            None
        } else {
            let ty = types.remove(0);
            check_deps(ty, errors)
        }
    } else {
        None
    };
    for (ty, (name, ty_name)) in types
        .iter()
        .zip([("state", "Battlefield"), ("ctx", "NodeContext")])
    {
        match ty {
            Type::Reference(r) if r.mutability.is_some() => errors.error(
                r.mutability.span(),
                format!("the engine lends `{name}` shared, not mutable: write `&{ty_name}`"),
            ),
            Type::Reference(_) => {}
            other => errors.error(
                other.span(),
                format!("take `{name}` by reference: write `{name}: &{ty_name}`"),
            ),
        }
    }

    let output = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => {
            errors.error(
                sig.ident.span(),
                "an #[aegis] node function returns `Result<StateDelta, E>` or `Result<Directive, E>`: add e.g. `-> Result<StateDelta, StateNodeError>`",
            );
            sig.ident.span()
        }
    };

    (errors.len() == before).then(|| ArgSpans {
        deps,
        state: types[0].span(),
        ctx: types[1].span(),
        output,
    })
}

/// Whether the function takes a dependency: three arguments and no `self`.
/// Decided on the shape alone, so a broken signature still gets the marker
/// graph! and builders expect of it.
pub(crate) fn takes_deps(func: &ItemFn) -> bool {
    func.sig.inputs.len() == 3 && func.sig.inputs.iter().all(|a| matches!(a, FnArg::Typed(_)))
}

/// The dependency's type `T` of `deps: &T`, reporting what the node could
/// not own: the node holds the instance for every run, so the dependency is
/// lent shared (`&T`), is one concrete type, and borrows nothing.
fn check_deps(ty: &Type, errors: &mut Errors) -> Option<Type> {
    let before = errors.len();
    let inner = match ty {
        Type::Reference(r) => {
            if let Some(m) = &r.mutability {
                errors.error(
                    m.span(),
                    "the node lends its dependency to every run at once, shared, not mutable: write `&T`, and put a `Mutex` (or an atomic) inside `T` for what changes",
                );
            }
            &*r.elem
        }
        other => {
            errors.error(
                other.span(),
                format!(
                    "take the dependency by reference: write `deps: &{}`; the node owns the instance and lends it to each run",
                    tokens_text(other)
                ),
            );
            return None;
        }
    };
    if let Type::ImplTrait(t) = inner {
        errors.error(
            t.span(),
            "a node's dependency is one concrete type, not `impl Trait`: name the type, or take `&dyn Trait`",
        );
    } else if let Some(lifetime) = borrowed_lifetime(&quote::quote!(#inner)) {
        errors.push(syn::Error::new_spanned(
            lifetime.0,
            format!(
                "a node owns its dependency, so the dependency cannot borrow: `{}` holds the lifetime `{}`; take an owned type (e.g. an `Arc<..>`)",
                tokens_text(inner),
                lifetime.1
            ),
        ));
    }
    (errors.len() == before).then(|| inner.clone())
}

/// The first lifetime other than `'static` in `tokens`, as tokens (for
/// its span) and as text.
fn borrowed_lifetime(tokens: &TokenStream) -> Option<(TokenStream, String)> {
    let mut iter = tokens.clone().into_iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Group(g) => {
                if let Some(found) = borrowed_lifetime(&g.stream()) {
                    return Some(found);
                }
            }
            TokenTree::Punct(p) if p.as_char() == '\'' => {
                if let Some(TokenTree::Ident(name)) = iter.peek()
                    && name != "static"
                {
                    let text = format!("'{name}");
                    let tokens =
                        TokenStream::from_iter([TokenTree::Punct(p), iter.peek()?.clone()]);
                    return Some((tokens, text));
                }
            }
            _ => {}
        }
    }
    None
}

/// `Battlefield` or `NodeContext` when `ty` is a reference to one: a
/// three-argument function that starts with the engine's arguments has its
/// dependency in the wrong place.
fn engine_type_first(ty: &Type) -> Option<String> {
    let Type::Reference(r) = ty else { return None };
    let Type::Path(p) = &*r.elem else { return None };
    let last = p.path.segments.last()?.ident.to_string();
    matches!(last.as_str(), "Battlefield" | "NodeContext").then_some(last)
}

/// A type as the user would write it.
fn tokens_text(ty: &Type) -> String {
    quote::quote!(#ty)
        .to_string()
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace("< ", "<")
        .replace(" ,", ",")
        .replace(" :: ", "::")
        .replace("& ", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn problems(item: TokenStream) -> Vec<String> {
        let func: ItemFn = syn::parse2(item).unwrap();
        let mut errors = Errors::new();
        check(&func, &mut errors);
        match errors.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_dependency_is_an_owned_type_lent_shared() {
        let ok = problems(quote!(
            async fn f<'a>(d: &'a Arc<dyn Ask + 'static>, s: &Battlefield, c: &NodeContext) -> R {}
        ));
        assert!(ok.is_empty(), "{ok:?}");
        let cases = [
            (
                quote!(d: Client),
                "take the dependency by reference: write `deps: &Client`",
            ),
            (quote!(d: &mut Client), "shared, not mutable"),
            (quote!(d: &impl Ask), "one concrete type, not `impl Trait`"),
            (
                quote!(d: &Client<'a>),
                "`Client<'a>` holds the lifetime `'a`",
            ),
            (
                quote!(d: &Pool<Box<dyn Ask + '_>>),
                "holds the lifetime `'_`",
            ),
        ];
        for (deps, expected) in cases {
            let found = problems(quote!(
                async fn f(#deps, s: &Battlefield, c: &NodeContext) -> R {}
            ));
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].contains(expected), "{found:?}");
        }
    }

    #[test]
    fn a_dependency_after_the_engines_arguments_is_misplaced() {
        let found = problems(quote!(
            async fn f(s: &Battlefield, d: &Client, c: &NodeContext) -> R {}
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("the dependency comes first"), "{found:?}");
    }

    #[test]
    fn the_arity_error_names_both_shapes() {
        let found = problems(quote!(
            async fn f(a: &A, b: &B, s: &Battlefield, c: &NodeContext) -> R {}
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("or three with a dependency first"),
            "{found:?}"
        );
        assert!(found[0].contains("this one takes 4"), "{found:?}");
    }
}
