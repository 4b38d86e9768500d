//! The block a checked `graph!` expands to: the builder calls, in
//! declaration order, that evaluate to the `WarGraph`. An `#[aegis]`
//! function is added through its descriptor macro, which first checks its
//! attribute against this graph (see `node_fn`).

use std::hash::{DefaultHasher, Hash, Hasher};

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{Graph, Node, is_reserved, names_a_std_macro};
use super::parse::{EdgeStmt, NodeKind, Rule, id_of};
use crate::attr::private_path;
use crate::policy::aegis_expr;

/// The expansion of a graph that passed every check of its own: `input`
/// is graph!'s input, handed on to the functions' descriptors.
pub(crate) fn expand(graph: &Graph, input: &TokenStream) -> TokenStream {
    let p = private_path(graph.krate.as_ref());
    // Hygienic (mixed-site) local: a user's `graph` in the expressions
    // inside graph! still means theirs.
    let g = format_ident!("__aegis_graph", span = Span::mixed_site());

    let fields = graph.fields.iter().map(|f| {
        let name = id_of(&f.name);
        let rule = syn::Ident::new(
            match f.rule {
                Rule::LastWrite => "LastWrite",
                Rule::Append => "Append",
                Rule::Sum => "Sum",
                Rule::Merge => "Merge",
            },
            f.rule_span,
        );
        let default = match &f.default {
            Some(json) => {
                let value = json.to_value_tokens(&p);
                quote!(::core::option::Option::Some(#value))
            }
            None => quote!(::core::option::Option::None),
        };
        let required = f.required;
        let deny = f.cache_deny;
        quote!(#p::field_spec(#name, #p::DispatchRule::#rule, #default, #required, #deny))
    });
    let limits = match &graph.limits {
        Some(expr) => quote!(#expr),
        None => quote!(<#p::EngineLimits as ::core::default::Default>::default()),
    };

    let nodes = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| add_node(i, n, &g, &p, input));
    let own = graph.nodes.iter().filter_map(|n| {
        let spec = n.own.as_ref()?;
        let id = id_of(&n.decl.id);
        let aegis = aegis_expr(spec, &format!("{id}_error"), &p);
        Some(quote!(#g.set_aegis(#id, #aegis);))
    });
    let default = graph.default_aegis.as_ref().map(|spec| {
        // check.rs made a default route name its error field.
        let aegis = aegis_expr(spec, "", &p);
        quote!(#g.with_default_aegis(#aegis);)
    });
    let edges = graph.edges.iter().map(|e| edge(e, &g, &p));
    let dynamic = graph.dynamic.iter().map(|id| {
        let id = id_of(id);
        quote!(#g.mark_dynamic_target(#id);)
    });
    let musters = graph.musters.iter().map(|m| {
        let (from, worker) = (id_of(&m.from), id_of(&m.worker));
        quote!(#g.declare_muster(#from, #worker);)
    });

    let fallback = fallback(graph, input);
    let reach = reach_chain(graph, &g, &p, input);

    quote! {
        {
            #fallback
            let mut #g = #p::WarGraph::new(
                #p::BattlefieldSchema::new(::std::vec![#(#fields),*]),
                #limits,
            );
            #(#nodes)*
            #(#own)*
            #default
            #(#edges)*
            #(#dynamic)*
            #(#musters)*
            #reach
            #g
        }
    }
}

/// The checks of the `#[aegis]` functions a graph with errors of its own
/// names, so their errors are reported with the graph's.
pub(crate) fn fn_node_checks(graph: &Graph, input: &TokenStream) -> TokenStream {
    let p = private_path(graph.krate.as_ref());
    let g = format_ident!("__aegis_graph", span = Span::mixed_site());
    let checks: TokenStream = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.decl.kind {
            NodeKind::Fn(path) if has_descriptor_call(n) => {
                Some(descriptor_call(path, "check", i, &g, &p, input))
            }
            _ => None,
        })
        .collect();
    let fallback = fallback(graph, input);
    quote!(#fallback #checks)
}

/// `path! { [callback] mode index (g) (p) { input } }`: the function's
/// descriptor calls `__graph_node!` with these and the attribute's tokens.
fn descriptor_call(
    path: &syn::Path,
    mode: &str,
    index: usize,
    g: &syn::Ident,
    p: &TokenStream,
    input: &TokenStream,
) -> TokenStream {
    let mode = syn::Ident::new(mode, Span::call_site());
    let literal = proc_macro2::Literal::usize_unsuffixed(index);
    probe(
        path,
        index,
        p,
        input,
        &quote!(#mode #literal (#g) (#p) { #input }),
    )
}

/// The first link of the reach chain (see `check::Unreached`), if the
/// graph needs one.
fn reach_chain(
    graph: &Graph,
    g: &syn::Ident,
    p: &TokenStream,
    input: &TokenStream,
) -> Option<TokenStream> {
    if graph.unreached.nodes.is_empty() {
        return None;
    }
    let (&first, rest) = graph.unreached.attributes.split_first()?;
    let NodeKind::Fn(path) = &graph.nodes.get(first)?.decl.kind else {
        return None;
    };
    Some(reach_call(path, first, rest, &[], g, p, input))
}

/// A link of the reach chain: the descriptor call of node `index`, the
/// function at `path`, with the nodes whose attributes are still to read
/// (`rest`) and the route targets read so far.
pub(crate) fn reach_call(
    path: &syn::Path,
    index: usize,
    rest: &[usize],
    routes: &[syn::Ident],
    g: &syn::Ident,
    p: &TokenStream,
    input: &TokenStream,
) -> TokenStream {
    let literal = proc_macro2::Literal::usize_unsuffixed(index);
    let rest = rest
        .iter()
        .map(|&i| proc_macro2::Literal::usize_unsuffixed(i));
    probe(
        path,
        index,
        p,
        input,
        &quote!(reach #literal (#g) (#p) { #input } [#(#rest)*] [#(#routes)*]),
    )
}

/// Calls the descriptor of node `index`, the function at `path`, with
/// `[callback] args`; or, if `path` is no `#[aegis]` function, the graph's
/// fallback (see [`fallback`]), which calls the callback with
/// `no_descriptor` first, so that the error is ours rather than rustc's
/// "cannot find macro".
///
/// The path is imported as written, then under the node's alias, in a
/// block of its own inside graph!'s block, which glob-imports the fallback
/// under every alias: the nearer import wins, namespace by namespace. So the alias is
/// the function's descriptor when it has one, and the fallback when the
/// path names a plain function (which has nothing in the macro namespace)
/// or nothing (then rustc reports the import of the path as written, and
/// its advice, such as the path to write instead, fits the node). rustc's
/// rules shape the rest: the imports are in a block of their own, as a
/// macro-expanded import may not shadow a glob one in its own block; the
/// aliases differ per node, as a glob import may not shadow an outer
/// block's name; and the call is in a block of its own, as an import of a
/// one-segment path waits for every macro call beside it (which could
/// define the name).
fn probe(
    path: &syn::Path,
    index: usize,
    p: &TokenStream,
    input: &TokenStream,
    args: &TokenStream,
) -> TokenStream {
    let Some(last) = path.segments.last().map(|s| &s.ident) else {
        return TokenStream::new();
    };
    // At the function's name, so that rustc's error for a path that names
    // nothing is at the node.
    let anchor = last.span();
    let alias = descriptor_alias(index, input, anchor);
    quote_spanned! {anchor=>
        {
            #[allow(unused_imports)]
            use #path;
            #[allow(unused_imports)]
            use #last as #alias;
            {
                // A statement, so rustc sees no braces around a lone
                // expression when it expands to an error alone.
                #alias!([#p::__graph_node] #args);
            }
        }
    }
}

/// The name node `index` of the graph! whose input is `input` is imported
/// under, and the fallback's. The input's digest tells a graph! nested in
/// another's (a Battalion's child, say) from its parent: an alias of the
/// inner graph! equal to one of the outer would make a plain function in
/// the inner graph an ambiguity error rather than ours.
pub(crate) fn descriptor_alias(index: usize, input: &TokenStream, span: Span) -> syn::Ident {
    format_ident!(
        "__aegis_descriptor_{:08x}_{index}",
        digest(input) & 0xffff_ffff,
        span = span
    )
}

/// A digest of the tokens' text, blind to spacing and spans: equal for
/// graph!'s input and for the copy the descriptor hands back.
fn digest(input: &TokenStream) -> u64 {
    fn feed(tokens: TokenStream, hasher: &mut DefaultHasher) {
        for tt in tokens {
            match tt {
                proc_macro2::TokenTree::Group(g) => {
                    format!("{:?}", g.delimiter()).hash(hasher);
                    feed(g.stream(), hasher);
                    "end".hash(hasher);
                }
                proc_macro2::TokenTree::Ident(i) => i.to_string().hash(hasher),
                proc_macro2::TokenTree::Punct(p) => p.as_char().hash(hasher),
                proc_macro2::TokenTree::Literal(l) => l.to_string().hash(hasher),
            }
        }
    }
    let mut hasher = DefaultHasher::new();
    feed(input.clone(), &mut hasher);
    hasher.finish()
}

/// The fallback [`probe`] relies on, and its glob import: a module whose
/// one macro, under the alias of every node that names a function,
/// forwards its input to the callback after `no_descriptor`. A
/// `macro_rules!`, not a path into the runtime, so the module needs no
/// path to `aegis` (a `crate = ".."` path may be relative to graph!'s
/// module). Nothing when no node names a function.
fn fallback(graph: &Graph, input: &TokenStream) -> Option<TokenStream> {
    let aliases: Vec<_> = graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| has_descriptor_call(n))
        .map(|(i, _)| descriptor_alias(i, input, Span::call_site()))
        .collect();
    if aliases.is_empty() {
        return None;
    }
    Some(quote! {
        #[doc(hidden)]
        mod __aegis_fallback {
            macro_rules! __aegis_no_descriptor {
                ([$($callback:tt)*] $($graph:tt)*) => {
                    $($callback)*! { no_descriptor $($graph)* }
                };
            }
            #(
                #[allow(unused_imports)]
                pub(crate) use __aegis_no_descriptor as #aliases;
            )*
        }
        #[allow(unused_imports)]
        use __aegis_fallback::*;
    })
}

/// Whether graph! calls node `n`'s descriptor: it names a function under
/// a name that is not reserved (that is reported already) nor a standard
/// macro's (`#[aegis]` refused that name and gave it no descriptor, and
/// the standard macro must not be called).
fn has_descriptor_call(n: &Node) -> bool {
    match &n.decl.kind {
        NodeKind::Fn(path) => !names_a_std_macro(path) && !is_reserved(&id_of(&n.decl.id)),
        _ => false,
    }
}

/// Adds the `#[aegis]` function at `path` as a node (or worker template),
/// with the instance of its dependency if it takes one.
pub(crate) fn add_fn_node(
    path: &syn::Path,
    deps: Option<&syn::Expr>,
    worker: bool,
    g: &syn::Ident,
    p: &TokenStream,
) -> TokenStream {
    let span = path.span();
    if let Some(instance) = deps {
        let node = quote_spanned!(span=> #path::with(#instance));
        return if worker {
            quote_spanned!(span=> #p::add_worker_aegis_node(&mut #g, #node);)
        } else {
            quote_spanned!(span=> #g.add_aegis_node(#node);)
        };
    }
    if worker {
        quote_spanned! {span=>
            #g.add_worker_template(
                #p::NodeId::new(<#path as #p::AegisNodeFn>::ID),
                <#path as #p::AegisNodeFn>::node_spec(),
            );
            #p::attach_aegis::<#path>(&mut #g);
        }
    } else {
        quote_spanned!(span=> #g.add_aegis_node(#path {});)
    }
}

fn add_node(
    index: usize,
    node: &Node,
    g: &syn::Ident,
    p: &TokenStream,
    input: &TokenStream,
) -> TokenStream {
    let id = id_of(&node.decl.id);
    let spec = match &node.decl.kind {
        NodeKind::Fn(path) if names_a_std_macro(path) => {
            return add_fn_node(
                path,
                node.decl.deps.as_ref(),
                node.decl.worker.is_some(),
                g,
                p,
            );
        }
        NodeKind::Fn(path) => return descriptor_call(path, "add", index, g, p, input),
        NodeKind::Paladin {
            paladin,
            template,
            output,
            task_independent,
        } => {
            let output = id_of(output);
            let input = if *task_independent {
                quote!(#p::InputMapping::new(#template).task_independent())
            } else {
                quote!(#p::InputMapping::new(#template))
            };
            quote!(#p::NodeSpec::paladin(#paladin, #input, #p::field(#output)))
        }
        NodeKind::Battalion {
            child,
            inputs,
            outputs,
        } => {
            let pairs = |list: &[(syn::Ident, syn::Ident)]| {
                let pairs = list.iter().map(|(a, b)| {
                    let (a, b) = (id_of(a), id_of(b));
                    quote!((#p::field(#a), #p::field(#b)))
                });
                quote!(::std::vec![#(#pairs),*])
            };
            let (inputs, outputs) = (pairs(inputs), pairs(outputs));
            quote!(#p::NodeSpec::battalion(#child, #inputs, #outputs))
        }
        NodeKind::Gate(spec) | NodeKind::Spec(spec) => quote!(#spec),
    };
    if node.decl.worker.is_some() {
        quote!(#g.add_worker_template(#p::NodeId::new(#id), #spec);)
    } else {
        quote!(#g.add_node(#id, #spec);)
    }
}

fn endpoint(id: &syn::Ident, p: &TokenStream) -> TokenStream {
    match id.to_string().as_str() {
        "START" => quote!(#p::START),
        "END" => quote!(#p::END),
        _ => {
            let id = id_of(id);
            quote!(#id)
        }
    }
}

fn edge(edge: &EdgeStmt, g: &syn::Ident, p: &TokenStream) -> TokenStream {
    match edge {
        EdgeStmt::Chain(groups) => {
            let mut out = TokenStream::new();
            for pair in groups.windows(2) {
                for from in &pair[0] {
                    for to in &pair[1] {
                        let (from, to) = (endpoint(from, p), endpoint(to, p));
                        out.extend(quote!(#g.add_edge(#from, #to);));
                    }
                }
            }
            out
        }
        EdgeStmt::Conditional {
            from,
            evaluator,
            targets,
        } => {
            let from = endpoint(from, p);
            let targets = targets.iter().map(|t| endpoint(t, p));
            quote!(#g.add_conditional_edges(#from, #evaluator, [#(#targets),*]);)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_tell_graphs_apart_but_not_spacing() {
        let graph = quote!(nodes { book } edges { START -> book -> END });
        let respaced: TokenStream = "nodes{book}edges{START->book->END}".parse().unwrap();
        let span = Span::call_site();
        assert_eq!(
            descriptor_alias(0, &graph, span),
            descriptor_alias(0, &respaced, span)
        );
        assert_ne!(
            descriptor_alias(0, &graph, span),
            descriptor_alias(1, &graph, span)
        );
        let other = quote!(nodes { book } edges { START -> book; book -> END });
        assert_ne!(
            descriptor_alias(0, &graph, span),
            descriptor_alias(0, &other, span)
        );
    }
}
