//! The block a checked `graph!` expands to: the compile-time checks of the
//! `#[aegis]` functions it names, then the builder calls, in declaration
//! order, that evaluate to the `WarGraph`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{Graph, Node};
use super::parse::{EdgeStmt, NodeKind, Rule, id_of};
use crate::attr::private_path;
use crate::policy::aegis_expr;

pub(crate) fn expand(graph: &Graph) -> TokenStream {
    let p = private_path(graph.krate.as_ref());
    // Hygienic (mixed-site) local: a user's `graph` in the expressions
    // inside graph! still means theirs.
    let g = format_ident!("__aegis_graph", span = Span::mixed_site());
    let facts = format_ident!("__AEGIS_GRAPH_FACTS");

    let aliases = fn_aliases(graph);
    let checks = fn_checks(graph, &facts, &p);
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
        .map(|(i, n)| add_node(i, n, &g, &p));
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

    quote! {
        {
            #aliases
            #checks
            let mut #g = #p::WarGraph::new(
                #p::BattlefieldSchema::new(::std::vec![#(#fields),*]),
                #limits,
            );
            #(#nodes)*
            #(#own)*
            #default
            #(#edges)*
            #(#dynamic)*
            #g
        }
    }
}

/// The name each function node's marker is used through: one alias per
/// node, so a path that is not an `#[aegis]` function is reported once.
fn alias(index: usize, path: &syn::Path) -> syn::Ident {
    format_ident!(
        "__AegisFnNode{}",
        index,
        span = Span::call_site().located_at(path.span())
    )
}

fn fn_aliases(graph: &Graph) -> TokenStream {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.decl.kind {
            NodeKind::Fn(path) => {
                let alias = alias(i, path);
                Some(quote_spanned!(path.span()=> type #alias = #path;))
            }
            _ => None,
        })
        .collect()
}

/// One `const` per `#[aegis]` function, running the check its attribute
/// generated against what this graph declares.
fn fn_checks(graph: &Graph, facts: &syn::Ident, p: &TokenStream) -> TokenStream {
    let calls: Vec<TokenStream> = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let NodeKind::Fn(path) = &n.decl.kind else {
                return None;
            };
            let node = alias(i, path);
            let id = id_of(&n.decl.id);
            let overridden = n.own.is_some();
            let worker = n.decl.worker.is_some();
            Some(quote_spanned! {path.span()=>
                const _: () = #node::__aegis_check(&#facts, #id, #overridden, #worker);
            })
        })
        .collect();
    if calls.is_empty() {
        return TokenStream::new();
    }
    let nodes = graph.nodes.iter().map(|n| id_of(&n.decl.id));
    let workers = graph
        .nodes
        .iter()
        .filter(|n| graph.is_worker(&id_of(&n.decl.id)))
        .map(|n| id_of(&n.decl.id));
    let fields = graph.fields.iter().map(|f| {
        let name = id_of(&f.name);
        let sum = f.rule == Rule::Sum;
        quote!((#name, #sum))
    });
    quote! {
        const #facts: #p::GraphFacts<'static> = #p::GraphFacts {
            nodes: &[#(#nodes),*],
            workers: &[#(#workers),*],
            fields: &[#(#fields),*],
        };
        #(#calls)*
    }
}

fn add_node(index: usize, node: &Node, g: &syn::Ident, p: &TokenStream) -> TokenStream {
    let id = id_of(&node.decl.id);
    let spec = match &node.decl.kind {
        NodeKind::Fn(path) => {
            let marker = alias(index, path);
            let span = path.span();
            return if node.decl.worker.is_some() {
                quote_spanned! {span=>
                    #g.add_worker_template(
                        #p::NodeId::new(<#marker as #p::AegisNodeFn>::ID),
                        <#marker as #p::AegisNodeFn>::node_spec(),
                    );
                    #p::attach_aegis::<#marker>(&mut #g);
                }
            } else {
                quote_spanned!(span=> #g.add_aegis_node(#marker {});)
            };
        }
        NodeKind::Paladin {
            paladin,
            template,
            output,
        } => {
            let output = id_of(output);
            quote!(#p::NodeSpec::paladin(#paladin, #p::InputMapping::new(#template), #p::field(#output)))
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
