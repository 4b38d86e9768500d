//! `__graph_node!`: the check of an `#[aegis]` function's attribute against
//! the graph that names it, and the builder call adding it.
//!
//! `graph!` invokes the function's descriptor macro (`attr::descriptor`)
//! with its own input; the descriptor calls back here with that input and
//! the attribute's tokens. So one proc macro sees both sides, and each
//! mistake is a plain `error:` at the offending token: the id graph!
//! declares, the route target, error field, absorbed field or cache key
//! field the attribute names, or the `Sum` in the schema. (The previous
//! design compared them in a `const fn` that panicked: rustc's
//! "evaluation panicked", at the node's name.)

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitBool, LitInt, LitStr, braced, bracketed, parenthesized};

use super::check::{self, Graph, Node, Owner, Scope, Site, check_policy};
use super::expand::{add_fn_node, reach_call};
use super::parse::{GraphInput, NodeKind};
use crate::attr::crate_site;
use crate::errors::Errors;
use crate::names::name_of;
use crate::policy::{self, Handler};

/// `mode index (g) (p) { graph input } [reach] site fn valid takes_deps { attribute args }`:
/// the first part from `graph!` (or the previous link of the reach chain),
/// the rest from the descriptor.
struct Callback {
    side: GraphSide,
    site: LitStr,
    fn_name: Ident,
    valid: bool,
    /// Whether the function takes a dependency first.
    takes_deps: bool,
    args: TokenStream,
}

/// `mode index (g) (p) { graph input }`, and for `reach`, `[rest] [routes]`.
struct GraphSide {
    /// `add` (emit the builder call), `check` (graph! has errors of its
    /// own and adds nothing) or `reach` (a link of the reach chain).
    add: bool,
    reach: Option<Reach>,
    index: usize,
    graph_var: Ident,
    private: TokenStream,
    input: TokenStream,
}

/// The state of the reach chain (see `check::Unreached`): the function
/// nodes whose attributes are still to read, and the route targets of
/// those read.
struct Reach {
    rest: Vec<usize>,
    routes: Vec<Ident>,
}

impl Parse for GraphSide {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mode: Ident = input.parse()?;
        let index: LitInt = input.parse()?;
        let graph_var;
        parenthesized!(graph_var in input);
        let private;
        parenthesized!(private in input);
        let graph;
        braced!(graph in input);
        let reach = if mode == "reach" {
            let rest;
            bracketed!(rest in input);
            let routes;
            bracketed!(routes in input);
            let mut indices = Vec::new();
            while !rest.is_empty() {
                indices.push(rest.parse::<LitInt>()?.base10_parse()?);
            }
            let mut targets = Vec::new();
            while !routes.is_empty() {
                targets.push(routes.call(Ident::parse_any)?);
            }
            Some(Reach {
                rest: indices,
                routes: targets,
            })
        } else {
            None
        };
        Ok(GraphSide {
            add: mode == "add",
            reach,
            index: index.base10_parse()?,
            graph_var: graph_var.parse()?,
            private: private.parse()?,
            input: graph.parse()?,
        })
    }
}

impl Parse for Callback {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let side: GraphSide = input.parse()?;
        let site: LitStr = input.parse()?;
        let fn_name: Ident = input.parse()?;
        let valid: LitBool = input.parse()?;
        let takes_deps: LitBool = input.parse()?;
        let args;
        braced!(args in input);
        Ok(Callback {
            side,
            site,
            fn_name,
            valid: valid.value,
            takes_deps: takes_deps.value,
            args: args.parse()?,
        })
    }
}

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    if let Some(rest) = strip_keyword(&input, "no_descriptor") {
        return match syn::parse2::<NoDescriptor>(rest) {
            Ok(call) => expand_no_descriptor(&call),
            Err(e) => e.to_compile_error(),
        };
    }
    match syn::parse2::<Callback>(input) {
        Ok(call) => expand_call(&call),
        Err(e) => e.to_compile_error(),
    }
}

/// The tokens after a leading `keyword`, if `input` starts with it.
fn strip_keyword(input: &TokenStream, keyword: &str) -> Option<TokenStream> {
    let mut tokens = input.clone().into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Ident(first)) if first == keyword => Some(tokens.collect()),
        _ => None,
    }
}

/// `no_descriptor` and the graph side of a descriptor call: what graph!'s
/// fallback passes on when the path of node `index` has no descriptor
/// macro, i.e. is not an `#[aegis]` function (see `expand::probe`).
struct NoDescriptor(GraphSide);

impl Parse for NoDescriptor {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        input.parse().map(NoDescriptor)
    }
}

/// The error for a node whose path names a function without `#[aegis]`.
///
/// It is a trait bound, not a `compile_error!`: the fallback also runs
/// when the path names nothing (a typo, a missing `use`), and then
/// rustc's "unresolved import" is the right and only error, as the
/// failed import's name is an error value that type checking skips. For
/// a plain function the bound fails on the function's item type, with
/// this message, at the path.
fn expand_no_descriptor(NoDescriptor(call): &NoDescriptor) -> TokenStream {
    if call.reach.is_some() {
        // The node's own descriptor call reported it; without its
        // attribute, the chain cannot tell which nodes nothing leads to.
        return TokenStream::new();
    }
    let graph = match syn::parse2::<GraphInput>(call.input.clone()) {
        Ok(input) => check::parse_and_check(input).graph,
        Err(e) => return e.to_compile_error(),
    };
    let Some(node) = graph.nodes.get(call.index) else {
        return internal("node index");
    };
    let NodeKind::Fn(path) = &node.decl.kind else {
        return internal("node kind");
    };
    let Some(last) = path.segments.last() else {
        return internal("node path");
    };
    let name = name_of(&last.ident);
    let id = name_of(&node.decl.id);
    let message = escape_braces(&format!(
        "`{name}` has no `#[aegis]`: add `#[aegis]` above `fn {name}`, or declare the node with its `NodeSpec`: `{id} = node(..)`"
    ));
    let note = escape_braces(&format!(
        "graph! makes a node of a function through its #[aegis]; any other node is declared by kind: `{id} = node(<NodeSpec>)`, `paladin(..)`, `battalion(..)` or `gate(..)`"
    ));
    // The failed bound is reported at the argument: the function's name.
    let value = super::expand::descriptor_alias(call.index, &call.input, last.ident.span());
    let check = quote::quote_spanned!(last.ident.span()=> AegisFunction::check(&#value));
    quote! {
        #[diagnostic::on_unimplemented(
            message = #message,
            label = "not an #[aegis] function",
            note = #note,
        )]
        #[allow(dead_code)]
        trait AegisFunction {
            fn check(&self) {}
        }
        #[diagnostic::do_not_recommend]
        impl AegisFunction for () {}
        #check;
    }
}

/// `{` and `}` written as themselves in an `on_unimplemented` string.
fn escape_braces(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

fn expand_call(call: &Callback) -> TokenStream {
    // graph! parsed this input before it called the descriptor, and
    // reported its own errors: only the graph's names are wanted here.
    let graph = match syn::parse2::<GraphInput>(call.side.input.clone()) {
        Ok(input) => check::parse_and_check(input).graph,
        Err(e) => return e.to_compile_error(),
    };
    if let Some(reach) = &call.side.reach {
        return expand_reach(call, reach, &graph);
    }
    let Some(node) = graph.nodes.get(call.side.index) else {
        return internal("node index");
    };
    let NodeKind::Fn(path) = &node.decl.kind else {
        return internal("node kind");
    };
    let mut errors = Errors::new();
    if call.valid {
        check_attribute(call, node, path, &graph, &mut errors);
    }
    // A function given a dependency it does not take, or not given the one
    // it takes, cannot be added; after a mistake in the signature the
    // attribute has reported it, and the node is left out silently.
    let matches = check_deps(call, node, path, call.valid, &mut errors);
    let add = (call.side.add && matches).then(|| {
        add_fn_node(
            path,
            node.decl.deps.as_ref(),
            node.decl.worker.is_some(),
            &call.side.graph_var,
            &call.side.private,
        )
    });
    let errors = errors.finish().err().map(|e| e.to_compile_error());
    quote!(#errors #add)
}

/// A link of the reach chain: adds the route target of this function's
/// attribute, if it routes, to those read; then calls the next function's
/// descriptor, or, after the last, reports each node nothing leads to.
/// After a mistake in an attribute, reported by the attribute or by this
/// graph's checks, the chain ends silently: what it would report could be
/// that mistake's echo.
fn expand_reach(call: &Callback, reach: &Reach, graph: &Graph) -> TokenStream {
    if !call.valid {
        return TokenStream::new();
    }
    let mut ignored = Errors::new();
    let spec = policy::parse_and_validate(call.args.clone(), &mut ignored);
    if !ignored.is_empty() {
        return TokenStream::new();
    }
    let mut routes = reach.routes.clone();
    if let Some(Handler::Route { to, .. }) = spec.on_error.map(|k| k.value) {
        routes.push(to);
    }
    let routed = |id: &Ident| routes.iter().any(|r| name_of(r) == name_of(id));
    if graph.unreached.nodes.iter().all(routed) {
        // Every node is led to: the attributes left need not be read.
        return TokenStream::new();
    }
    if let Some((&next, rest)) = reach.rest.split_first() {
        let Some(NodeKind::Fn(path)) = graph.nodes.get(next).map(|n| &n.decl.kind) else {
            return internal("next node");
        };
        return reach_call(
            path,
            next,
            rest,
            &routes,
            &call.side.graph_var,
            &call.side.private,
            &call.side.input,
        );
    }
    let declared = |route: &Ident| {
        graph
            .nodes
            .iter()
            .any(|n| name_of(&n.decl.id) == name_of(route))
    };
    if !routes.iter().all(declared) {
        // A route to an undeclared node is reported by its function's
        // check; the node it was meant for would be reported again here.
        return TokenStream::new();
    }
    graph
        .unreached
        .nodes
        .iter()
        .filter(|id| !routed(id))
        .map(|id| check::unreached_error(id).to_compile_error())
        .collect()
}

/// graph! and this callback come from one crate, so this does not happen.
fn internal(what: &str) -> TokenStream {
    let message = format!(
        "internal error in graph!: the {what} passed to an #[aegis] descriptor is wrong; please report it"
    );
    quote!(::core::compile_error!(#message);)
}

/// Whether graph! gives the function an instance exactly when it takes a
/// dependency; if not, and `report`, the error says which way to fix it.
fn check_deps(
    call: &Callback,
    node: &Node,
    path: &syn::Path,
    report: bool,
    errors: &mut Errors,
) -> bool {
    let fn_name = name_of(&call.fn_name);
    let written = quote!(#path).to_string().replace(' ', "");
    match (&node.decl.deps, call.takes_deps) {
        (Some(_), true) | (None, false) => true,
        (None, true) => {
            if report {
                let anchor = path
                    .segments
                    .last()
                    .map_or_else(|| node.decl.id.span(), |s| s.ident.span());
                errors.error(
                    anchor,
                    format!(
                        "the #[aegis] function `{fn_name}` takes a dependency first, and graph! gives it none: declare the node with its instance, `{written}(instance)`, e.g. `{written}(client.clone())`"
                    ),
                );
            }
            false
        }
        (Some(instance), false) => {
            if report {
                errors.push(syn::Error::new_spanned(
                    instance,
                    format!(
                        "the #[aegis] function `{fn_name}` takes no dependency, so it cannot be given this instance: declare it as plain `{written}`, or make the function take it first, `async fn {fn_name}(deps: &T, state: &Battlefield, ctx: &NodeContext)`"
                    ),
                ));
            }
            false
        }
    }
}

/// The attribute's id against the name graph! declares it under, then (if
/// graph! did not give the node its own Aegis) every name the attribute
/// uses against the graph's schema and nodes.
fn check_attribute(
    call: &Callback,
    node: &Node,
    path: &syn::Path,
    graph: &Graph,
    errors: &mut Errors,
) {
    let mut ignored = Errors::new();
    let spec = policy::parse_and_validate(call.args.clone(), &mut ignored);
    if !ignored.is_empty() {
        // Reported by the attribute, which then marks itself not valid:
        // this is only a descriptor from another version of the macros.
        return;
    }
    let fn_name = name_of(&call.fn_name);
    let id = spec
        .id
        .as_ref()
        .map_or_else(|| fn_name.clone(), |(id, ..)| id.clone());
    let declared = name_of(&node.decl.id);
    if id != declared {
        let message = if spec.id.is_none() {
            format!(
                "graph! declares the function `{fn_name}` as the node `{declared}`, but its node id is `{id}`: declare it as plain `{fn_name}`, or give it `#[aegis(id = \"{declared}\")]`"
            )
        } else if syn::parse_str::<Ident>(&id).is_ok() {
            format!(
                "the function `{fn_name}` is the node `{id}` (its #[aegis] sets `id = \"{id}\"`), and graph! names nodes by id: declare it as `{id} = {}`",
                quote!(#path).to_string().replace(' ', "")
            )
        } else {
            format!(
                "the function `{fn_name}` is the node `{id}` (its #[aegis] sets the id), which is not an identifier graph! can name: use an identifier id, or add it with `WarGraph::add_aegis_node`"
            )
        };
        errors.error(node.decl.id.span(), message);
    }
    if node.own.is_some() {
        // graph! gave the node its own Aegis, which replaces the
        // attribute's, and graph! checked that one itself.
        return;
    }
    let anchor = path
        .segments
        .last()
        .map_or_else(|| node.decl.id.span(), |s| s.ident.span());
    let site = Site::Attribute {
        fn_name: &fn_name,
        anchor,
        local: call.site.value() == crate_site(),
    };
    let owner = Owner {
        decl: &node.decl,
        id,
    };
    check_policy(&spec, Some(&owner), &Scope::of(graph), site, errors);
}

#[cfg(test)]
mod tests {
    use super::super::expand::descriptor_alias;
    use super::*;

    /// The callback's expansion for node `index` of `graph`, as the
    /// descriptor of `fn_name` with these attribute `args` calls it.
    fn callback(
        mode: &str,
        index: usize,
        graph: TokenStream,
        fn_name: &str,
        valid: bool,
        args: TokenStream,
    ) -> String {
        callback_deps(mode, index, graph, fn_name, valid, false, args)
    }

    /// `callback` for a function that takes a dependency if `takes_deps`.
    fn callback_deps(
        mode: &str,
        index: usize,
        graph: TokenStream,
        fn_name: &str,
        valid: bool,
        takes_deps: bool,
        args: TokenStream,
    ) -> String {
        let mode = Ident::new(mode, proc_macro2::Span::call_site());
        let index = proc_macro2::Literal::usize_unsuffixed(index);
        let fn_name = Ident::new(fn_name, proc_macro2::Span::call_site());
        let site = crate_site();
        expand(quote! {
            #mode #index (__aegis_graph) (::aegis::__private) { #graph }
            #site #fn_name #valid #takes_deps { #args }
        })
        .to_string()
    }

    fn errors(out: &str) -> usize {
        out.matches("compile_error").count()
    }

    #[test]
    fn checks_the_attribute_against_the_graph_and_adds_the_node() {
        let graph = quote! {
            schema { book_error: LastWrite, booking: LastWrite }
            nodes { book, refnd = node(spec()) }
            edges { START -> book -> END }
        };
        let out = callback(
            "add",
            0,
            graph.clone(),
            "book",
            true,
            quote!(
                on_error(route = refund),
                cache(ttl = "1m", key = fields(bookng))
            ),
        );
        assert_eq!(errors(&out), 2, "{out}");
        assert!(
            out.contains("route target `refund` (in the #[aegis] of `book`) is not a node of this graph: declare it in `nodes { .. }` (did you mean `refnd`?)"),
            "{out}"
        );
        assert!(
            out.contains("cache key field `bookng` (in the #[aegis] of `book`)"),
            "{out}"
        );
        assert!(out.contains("add_aegis_node"), "{out}");

        let out = callback("add", 0, graph, "book", true, quote!(retry(max = 2)));
        assert_eq!(errors(&out), 0, "{out}");
        assert!(
            out.contains("__aegis_graph . add_aegis_node (book { })"),
            "{out}"
        );
    }

    #[test]
    fn a_broken_attribute_is_added_unchecked() {
        let graph = quote!(nodes { book } edges { START -> book -> END });
        // The attribute reported its own mistake and sent no tokens.
        let out = callback("add", 0, graph, "book", false, quote!());
        assert_eq!(errors(&out), 0, "{out}");
        assert!(out.contains("add_aegis_node"), "{out}");
    }

    #[test]
    fn check_mode_reports_and_adds_nothing() {
        let graph = quote!(nodes { book } edges { START -> book -> ghost });
        let out = callback(
            "check",
            0,
            graph,
            "book",
            true,
            quote!(on_error(absorb(x = 1))),
        );
        assert_eq!(errors(&out), 1, "{out}");
        assert!(out.contains("absorbed field `x`"), "{out}");
        assert!(!out.contains("add_aegis_node"), "{out}");
    }

    #[test]
    fn an_override_in_graph_replaces_the_attribute_but_not_its_id() {
        let graph = quote! {
            nodes { #[aegis(retry)] other = book }
            edges { START -> other -> END }
        };
        let out = callback(
            "add",
            0,
            graph,
            "book",
            true,
            quote!(on_error(route = nowhere)),
        );
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains(
                "graph! declares the function `book` as the node `other`, but its node id is `book`"
            ),
            "{out}"
        );
    }

    #[test]
    fn ids_set_by_the_attribute_are_named_by_id() {
        let graph = quote!(nodes { nodes::book } edges { START -> book -> END });
        let out = callback("add", 0, graph.clone(), "book", true, quote!(id = "booker"));
        assert!(
            out.contains("graph! names nodes by id: declare it as `booker = nodes::book`"),
            "{out}"
        );
        let out = callback("add", 0, graph, "book", true, quote!(id = "book-it"));
        assert!(
            out.contains("which is not an identifier graph! can name"),
            "{out}"
        );
    }

    #[test]
    fn worker_templates_are_added_as_such_and_cannot_route() {
        let graph = quote! {
            schema { score_error: LastWrite }
            nodes { worker score, cancel }
            edges { START -> cancel -> END }
        };
        let out = callback(
            "add",
            0,
            graph,
            "score",
            true,
            quote!(on_error(route = cancel)),
        );
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains("`score` is declared a worker template, and its #[aegis] routes failures to `cancel`"),
            "{out}"
        );
        assert!(out.contains("add_worker_template"), "{out}");
        assert!(out.contains("attach_aegis"), "{out}");
    }

    #[test]
    fn a_sum_error_field_is_reported_once() {
        let graph = quote! {
            schema { failures: Sum = 0 }
            nodes { book, cancel }
            edges { START -> book -> END }
        };
        let out = callback(
            "add",
            0,
            graph,
            "book",
            true,
            quote!(on_error(route = cancel, error_field = failures)),
        );
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains(
                "error field `failures` (in the #[aegis] of `book`) is declared `Sum` here"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_dependency_is_given_exactly_to_functions_taking_one() {
        let graph = quote! {
            schema { answer: LastWrite }
            nodes { answer(client.clone()), worker nodes::scorer(Arc::new(S)), plain }
            edges { START -> answer -> plain -> END }
        };
        let out = callback_deps("add", 0, graph.clone(), "answer", true, true, quote!());
        assert_eq!(errors(&out), 0, "{out}");
        assert!(
            out.contains("__aegis_graph . add_aegis_node (answer :: with (client . clone ())) ;"),
            "{out}"
        );
        let out = callback_deps("add", 1, graph.clone(), "scorer", true, true, quote!());
        assert_eq!(errors(&out), 0, "{out}");
        assert!(
            out.contains("add_worker_aegis_node (& mut __aegis_graph , nodes :: scorer :: with (Arc :: new (S)))"),
            "{out}"
        );

        // The function takes none: the instance is the mistake.
        let out = callback_deps("add", 0, graph.clone(), "answer", true, false, quote!());
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains("the #[aegis] function `answer` takes no dependency, so it cannot be given this instance: declare it as plain `answer`"),
            "{out}"
        );
        assert!(!out.contains("add_aegis_node"), "{out}");

        // The function takes one and graph! gives none.
        let out = callback_deps("add", 2, graph.clone(), "plain", true, true, quote!());
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains("the #[aegis] function `plain` takes a dependency first, and graph! gives it none: declare the node with its instance, `plain(instance)`"),
            "{out}"
        );
        assert!(!out.contains("add_aegis_node"), "{out}");

        // After a mistake in the signature, the attribute has reported it:
        // the node is left out without a second error.
        let out = callback_deps("add", 2, graph, "plain", false, true, quote!());
        assert_eq!(errors(&out), 0, "{out}");
        assert!(!out.contains("add_aegis_node"), "{out}");
    }

    #[test]
    fn a_path_without_a_descriptor_is_reported_at_the_path() {
        // What graph!'s fallback passes on for node 1, `nodes::refund`.
        let graph = quote! {
            nodes { book, undo = nodes::refund }
            edges { START -> book -> undo -> END }
        };
        let out = expand(quote! {
            no_descriptor add 1 (__aegis_graph) (::aegis::__private) { #graph }
        })
        .to_string();
        let alias = descriptor_alias(1, &graph, proc_macro2::Span::call_site());
        assert!(
            out.contains("`refund` has no `#[aegis]`: add `#[aegis]` above `fn refund`, or declare the node with its `NodeSpec`: `undo = node(..)`"),
            "{out}"
        );
        // A failed bound on the imported path, not a compile_error!: a
        // path naming nothing is left to rustc's unresolved import.
        assert!(out.contains("on_unimplemented"), "{out}");
        assert!(
            out.contains(&format!("AegisFunction :: check (& {alias})")),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("add_aegis_node"), "{out}");
        // Braces in the message are escaped for on_unimplemented.
        assert_eq!(escape_braces("dynamic { x }"), "dynamic {{ x }}");
    }

    /// A link of the reach chain, for node `index` of `graph`, as the
    /// descriptor of `fn_name` with these attribute `args` calls it.
    fn reach_link(
        index: usize,
        graph: &TokenStream,
        rest: &[usize],
        routes: &[&str],
        (fn_name, valid): (&str, bool),
        args: TokenStream,
    ) -> String {
        let index = proc_macro2::Literal::usize_unsuffixed(index);
        let rest = rest
            .iter()
            .map(|&i| proc_macro2::Literal::usize_unsuffixed(i));
        let routes = routes
            .iter()
            .map(|r| Ident::new(r, proc_macro2::Span::call_site()));
        let fn_name = Ident::new(fn_name, proc_macro2::Span::call_site());
        let site = crate_site();
        expand(quote! {
            reach #index (__aegis_graph) (::aegis::__private) { #graph } [#(#rest)*] [#(#routes)*]
            #site #fn_name #valid false { #args }
        })
        .to_string()
    }

    #[test]
    fn the_reach_chain_reads_every_attribute_then_reports_what_none_routes_to() {
        let graph = quote! {
            schema { failure: LastWrite }
            nodes { plan, done, book, cancel }
            edges { START -> plan -> book -> END; done -> END; cancel -> END; }
        };
        let checked = check::parse_and_check(syn::parse2(graph.clone()).unwrap());
        assert!(checked.errors.is_empty());
        let unreached = &checked.graph.unreached;
        assert_eq!(
            unreached.nodes.iter().map(name_of).collect::<Vec<_>>(),
            ["done", "cancel"]
        );
        assert_eq!(unreached.attributes, [0, 1, 2, 3]);

        // A link with attributes still to read calls the next descriptor,
        // with the route targets read so far.
        let out = reach_link(
            2,
            &graph,
            &[3],
            &[],
            ("book", true),
            quote!(on_error(route = cancel, error_field = failure)),
        );
        let alias = descriptor_alias(3, &graph, proc_macro2::Span::call_site());
        assert!(out.contains(&format!("use cancel as {alias}")), "{out}");
        assert!(out.contains("reach 3 (__aegis_graph)"), "{out}");
        assert!(out.contains("[] [cancel]"), "{out}");
        assert_eq!(errors(&out), 0, "{out}");

        // Once every node is routed to, the rest need not be read.
        let out = reach_link(
            2,
            &graph,
            &[3],
            &["done"],
            ("book", true),
            quote!(on_error(route = cancel, error_field = failure)),
        );
        assert_eq!(out, "");

        // The last reports the nodes no route leads to, at their names.
        let out = reach_link(3, &graph, &[], &["cancel"], ("cancel", true), quote!());
        assert_eq!(errors(&out), 1, "{out}");
        assert!(
            out.contains("`done` has no edge into it, so it would never run: add an edge to it in `edges { .. }`, or, if a node reaches it with `Directive::goto`, list it in `dynamic { done }`"),
            "{out}"
        );

        // After a broken attribute, or a route to an undeclared node, it
        // says nothing: what it would say could be that mistake's echo.
        let out = reach_link(3, &graph, &[], &["cancel"], ("cancel", false), quote!());
        assert_eq!(out, "");
        let out = reach_link(3, &graph, &[], &["dnoe"], ("cancel", true), quote!());
        assert_eq!(out, "");
        // So does the fallback, for a node that is no #[aegis] function:
        // its own descriptor call reported it.
        let out = expand(quote! {
            no_descriptor reach 1 (__aegis_graph) (::aegis::__private) { #graph } [2 3] []
        })
        .to_string();
        assert_eq!(out, "");
    }

    #[test]
    fn graph_reports_what_nothing_leads_to_when_no_attribute_could() {
        let unreached = |graph: TokenStream| {
            let checked = check::parse_and_check(syn::parse2(graph).unwrap());
            let messages: Vec<String> = checked
                .errors
                .finish()
                .err()
                .into_iter()
                .flatten()
                .map(|e| e.to_string())
                .collect();
            (messages, checked.graph.unreached)
        };
        // No function, or one whose Aegis graph! gives: graph! knows.
        let (messages, _) = unreached(quote! {
            schema { failure: LastWrite }
            nodes {
                #[aegis(on_error(route = rescue, error_field = failure))] step,
                rescue = node(spec()),
                lost = paladin(p(), "x" -> failure),
            }
            edges { START -> step -> END; rescue -> END; lost -> END; }
        });
        // A `node(..)` may be a Gate, whose targets graph! cannot read.
        assert!(messages.is_empty(), "{messages:?}");
        let (messages, rest) = unreached(quote! {
            schema { failure: LastWrite }
            nodes {
                #[aegis(on_error(route = rescue, error_field = failure))] step,
                #[aegis] rescue,
                lost = paladin(p(), "x" -> failure),
                worker score = paladin(p(), "{task.key}" -> failure),
                picked = paladin(p(), "x" -> failure),
                jumped = paladin(p(), "x" -> failure),
            }
            default_aegis { timeout(run = "1s") }
            edges { START -> step -> END; step ?> "pick" -> [picked]; rescue -> END; lost -> END; }
            dynamic { jumped }
        });
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].starts_with("`lost` has no edge into it"),
            "{messages:?}"
        );
        assert!(rest.attributes.is_empty());
        // A graph with a mistake of its own is not checked for them.
        let (messages, rest) = unreached(quote! {
            nodes { a, b }
            edges { START -> a -> bb; b -> END; }
        });
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(rest.nodes.is_empty());
    }

    #[test]
    fn malformed_callback_input_is_an_error_not_a_panic() {
        let out = expand(quote!(add x)).to_string();
        assert!(out.contains("compile_error"), "{out}");
        let out = callback("add", 7, quote!(nodes { book }), "book", true, quote!());
        assert!(out.contains("internal error in graph!"), "{out}");
    }
}
