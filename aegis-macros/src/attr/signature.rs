//! What an `#[aegis]` function must look like:
//! `async fn name(state: &Battlefield, ctx: &NodeContext) -> Result<T, E>`.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, GenericParam, ItemFn, ReturnType, Signature, Type};

use crate::errors::Errors;

const SHAPE: &str =
    "async fn name(state: &Battlefield, ctx: &NodeContext) -> Result<StateDelta, StateNodeError>";

/// The spans of the two argument types, for pointing type errors at them.
pub(crate) struct ArgSpans {
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
    if receivers == 0 && types.len() != 2 {
        errors.error(
            if sig.inputs.is_empty() { sig.paren_token.span.join() } else { sig.inputs.span() },
            format!(
                "an #[aegis] node function takes exactly two arguments, `(state: &Battlefield, ctx: &NodeContext)`, and this one takes {}: write `{SHAPE}`",
                types.len()
            ),
        );
    }
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
        state: types[0].span(),
        ctx: types[1].span(),
        output,
    })
}
