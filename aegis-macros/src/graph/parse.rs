//! `graph!`'s syntax: sections, schema fields, nodes and edges.
//!
//! The top level is parsed in one pass (an unknown section stops it); each
//! section's items are split at their separators and parsed one by one, so
//! a mistake in one item does not hide the mistakes in the others.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Ident, LitStr, Meta, Token, braced, bracketed, parenthesized};

use crate::errors::Errors;
use crate::json::Json;
use crate::names::{did_you_mean, name_of};

/// A section's key and its raw content.
pub(crate) struct Section {
    pub(crate) key: Ident,
    pub(crate) content: TokenStream,
}

/// The whole `graph! { .. }` input, sections still raw.
#[derive(Default)]
pub(crate) struct GraphInput {
    pub(crate) krate: Option<syn::Path>,
    pub(crate) limits: Option<Expr>,
    pub(crate) schema: Option<Section>,
    pub(crate) nodes: Option<Section>,
    pub(crate) default_aegis: Option<Section>,
    pub(crate) edges: Option<Section>,
    pub(crate) dynamic: Option<Section>,
    pub(crate) musters: Option<Section>,
}

/// graph!'s sections parsed item by item: a malformed item is reported
/// and left out, and the rest still parse, so one mistake does not hide
/// the others. `input` keeps the raw `default_aegis` (a policy, parsed and
/// validated with the checks) and the edges section's span.
pub(crate) struct Sections {
    pub(crate) input: GraphInput,
    pub(crate) fields: Vec<FieldDecl>,
    pub(crate) decls: Vec<NodeDecl>,
    pub(crate) edges: Vec<EdgeStmt>,
    pub(crate) dynamic: Vec<Ident>,
    pub(crate) musters: Vec<MusterDecl>,
    /// Whether every field parsed: when one did not, its error is already
    /// reported and "undeclared field" would only echo it.
    pub(crate) fields_complete: bool,
    /// The same for the nodes.
    pub(crate) nodes_complete: bool,
}

/// Parses each section of `input` item by item into [`Sections`],
/// reporting every malformed item into `errors`.
pub(crate) fn sections(input: GraphInput, errors: &mut Errors) -> Sections {
    let fields = match &input.schema {
        Some(s) => parse_items(&s.content, ',', errors, parse_field),
        None => Vec::new(),
    };
    let fields_complete = errors.is_empty();
    let before_nodes = errors.len();
    let decls = match &input.nodes {
        Some(s) => parse_items(&s.content, ',', errors, parse_node),
        None => {
            errors.error(
                Span::call_site(),
                "graph! needs a `nodes { .. }` section declaring the graph's nodes",
            );
            Vec::new()
        }
    };
    let nodes_complete = errors.len() == before_nodes;
    let edges = match &input.edges {
        Some(s) => parse_items(&s.content, ';', errors, parse_edge),
        None => Vec::new(),
    };
    let dynamic = match &input.dynamic {
        Some(s) => parse_items(&s.content, ',', errors, parse_dynamic),
        None => Vec::new(),
    };
    let musters = match &input.musters {
        Some(s) => parse_items(&s.content, ',', errors, parse_muster),
        None => Vec::new(),
    };
    Sections {
        input,
        fields,
        decls,
        edges,
        dynamic,
        musters,
        fields_complete,
        nodes_complete,
    }
}

const SECTIONS: [&str; 8] = [
    "crate",
    "limits",
    "schema",
    "nodes",
    "default_aegis",
    "edges",
    "dynamic",
    "musters",
];

impl Parse for GraphInput {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut out = GraphInput::default();
        let mut seen: Vec<String> = Vec::new();
        while !input.is_empty() {
            let key = input.call(Ident::parse_any)?;
            let name = key.to_string();
            if !SECTIONS.contains(&name.as_str()) {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown graph! section `{name}`{}: the sections are `schema {{ .. }}`, `nodes {{ .. }}`, `default_aegis {{ .. }}`, `edges {{ .. }}`, `dynamic {{ .. }}`, `musters {{ .. }}`, `limits = ..;` and `crate = \"..\";`",
                        did_you_mean(&name, SECTIONS)
                    ),
                ));
            }
            if seen.contains(&name) {
                return Err(syn::Error::new(
                    key.span(),
                    format!("the `{name}` section is given twice: merge them into one"),
                ));
            }
            seen.push(name.clone());
            match name.as_str() {
                "crate" => {
                    input.parse::<Token![=]>()?;
                    let lit: LitStr = input.parse()?;
                    out.krate = Some(lit.parse().map_err(|_| {
                        syn::Error::new(
                            lit.span(),
                            "`crate` is the path of the `aegis` crate in quotes: e.g. `crate = \"::aegis\";`",
                        )
                    })?);
                    input.parse::<Token![;]>()?;
                }
                "limits" => {
                    input.parse::<Token![=]>()?;
                    out.limits = Some(input.parse()?);
                    input.parse::<Token![;]>()?;
                }
                _ => {
                    if !input.peek(syn::token::Brace) {
                        return Err(input.error(format!("expected `{name} {{ .. }}`")));
                    }
                    let content;
                    braced!(content in input);
                    let section = Some(Section {
                        key,
                        content: content.parse()?,
                    });
                    match name.as_str() {
                        "schema" => out.schema = section,
                        "nodes" => out.nodes = section,
                        "default_aegis" => out.default_aegis = section,
                        "edges" => out.edges = section,
                        "musters" => out.musters = section,
                        _ => out.dynamic = section,
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Splits `tokens` at top-level `sep` punctuation (groups are atomic), and
/// parses each non-empty piece with `parse`, collecting errors.
pub(crate) fn parse_items<T>(
    tokens: &TokenStream,
    sep: char,
    errors: &mut Errors,
    parse: impl Fn(ParseStream<'_>) -> syn::Result<T>,
) -> Vec<T> {
    let mut pieces: Vec<TokenStream> = vec![TokenStream::new()];
    for tt in tokens.clone() {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == sep => pieces.push(TokenStream::new()),
            _ => {
                if let Some(last) = pieces.last_mut() {
                    last.extend([tt]);
                }
            }
        }
    }
    pieces
        .into_iter()
        .filter(|p| !p.is_empty())
        .filter_map(|p| errors.syn((&parse).parse2(p)))
        .collect()
}

/// The dispatch rules, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    LastWrite,
    Append,
    Sum,
    Merge,
}

const RULES: [&str; 4] = ["LastWrite", "Append", "Sum", "Merge"];

/// `name: Rule [= default] [required] [cache = deny]`.
pub(crate) struct FieldDecl {
    pub(crate) name: Ident,
    pub(crate) rule: Rule,
    pub(crate) rule_span: Span,
    pub(crate) default: Option<Json>,
    pub(crate) required: bool,
    pub(crate) cache_deny: bool,
}

pub(crate) fn parse_field(input: ParseStream<'_>) -> syn::Result<FieldDecl> {
    let name = input.call(Ident::parse_any)?;
    input.parse::<Token![:]>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected `{name}: LastWrite` (or `Append`, `Sum`, `Merge`)"),
        )
    })?;
    let rule_ident: Ident = input.parse()?;
    let rule = match rule_ident.to_string().as_str() {
        "LastWrite" => Rule::LastWrite,
        "Append" => Rule::Append,
        "Sum" => Rule::Sum,
        "Merge" => Rule::Merge,
        other => {
            return Err(syn::Error::new(
                rule_ident.span(),
                format!(
                    "unknown dispatch rule `{other}`{}: the rules are `LastWrite`, `Append`, `Sum` and `Merge`",
                    did_you_mean(other, RULES)
                ),
            ));
        }
    };
    let mut field = FieldDecl {
        name,
        rule,
        rule_span: rule_ident.span(),
        default: None,
        required: false,
        cache_deny: false,
    };
    while !input.is_empty() {
        if input.peek(Token![=]) {
            let eq: Token![=] = input.parse()?;
            if field.default.is_some() {
                return Err(syn::Error::new(
                    eq.span,
                    "the default is given twice: keep one",
                ));
            }
            field.default = Some(input.parse()?);
            continue;
        }
        let modifier = input.call(Ident::parse_any)?;
        match modifier.to_string().as_str() {
            "required" => field.required = true,
            "cache" => {
                input.parse::<Token![=]>()?;
                let marker: Ident = input.parse()?;
                field.cache_deny = match marker.to_string().as_str() {
                    "deny" => true,
                    "allow" => false,
                    _ => {
                        return Err(syn::Error::new(
                            marker.span(),
                            "`cache` is `deny` (never serve this field from a cached delta) or `allow`",
                        ));
                    }
                };
            }
            other => {
                return Err(syn::Error::new(
                    modifier.span(),
                    format!(
                        "unexpected `{other}` after the dispatch rule{}: a field takes `= <default>`, `required` and `cache = deny`",
                        did_you_mean(other, ["required", "cache"])
                    ),
                ));
            }
        }
    }
    Ok(field)
}

/// What a node is, as declared.
pub(crate) enum NodeKind {
    /// An `#[aegis]` function, by path.
    Fn(syn::Path),
    /// `paladin(expr, "template" -> output[, task_independent])`.
    Paladin {
        paladin: Expr,
        template: LitStr,
        output: Ident,
        /// `task_independent`: a worker template's prompt is the same for
        /// every task on purpose.
        task_independent: bool,
    },
    /// `battalion(child, inputs(a -> b), outputs(c -> d))`.
    Battalion {
        child: Expr,
        inputs: Vec<(Ident, Ident)>,
        outputs: Vec<(Ident, Ident)>,
    },
    /// `gate(expr)`: a Gate node's `NodeSpec`.
    Gate(Expr),
    /// `node(expr)`: any other `NodeSpec`.
    Spec(Expr),
}

/// `[#[aegis(..)]] [worker] (path[(instance)] | id = kind(..) | id = path[(instance)])`.
pub(crate) struct NodeDecl {
    /// `#[aegis(..)]` on the node in graph!: its own Aegis, replacing the
    /// function's; the span is the attribute's.
    pub(crate) override_args: Option<(Span, TokenStream)>,
    pub(crate) worker: Option<Span>,
    pub(crate) id: Ident,
    pub(crate) kind: NodeKind,
    /// `answer(instance)`: the instance of the dependency an `#[aegis]`
    /// function (`NodeKind::Fn`) takes first; always `None` for other kinds.
    pub(crate) deps: Option<Expr>,
}

const KINDS: [&str; 4] = ["paladin", "battalion", "gate", "node"];

pub(crate) fn parse_node(input: ParseStream<'_>) -> syn::Result<NodeDecl> {
    let attrs = input.call(Attribute::parse_outer)?;
    let mut override_args = None;
    for attr in attrs {
        if !attr.path().is_ident("aegis") {
            return Err(syn::Error::new_spanned(
                attr.path(),
                "only `#[aegis(..)]` goes on a graph! node: it sets the node's own Aegis",
            ));
        }
        if override_args.is_some() {
            return Err(syn::Error::new_spanned(
                &attr,
                "this node already has an `#[aegis(..)]`: merge them into one",
            ));
        }
        let span = attr.pound_token.span;
        override_args = Some(match attr.meta {
            Meta::Path(_) => (span, TokenStream::new()),
            Meta::List(list) => (span, list.tokens),
            Meta::NameValue(nv) => {
                return Err(syn::Error::new_spanned(
                    nv,
                    "write `#[aegis(retry(..), ..)]`",
                ));
            }
        });
    }

    // `worker` is a modifier only when a node follows it: a function may
    // itself be called `worker`.
    let worker = {
        let fork = input.fork();
        match fork.parse::<Ident>() {
            Ok(w) if w == "worker" && (fork.peek(Ident) || fork.peek(Token![::])) => {
                input.parse::<Ident>()?;
                Some(w.span())
            }
            _ => None,
        }
    };

    if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
        let id: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let (kind, deps) = parse_kind(input)?;
        return Ok(NodeDecl {
            override_args,
            worker,
            id,
            kind,
            deps,
        });
    }
    let path: syn::Path = input.parse()?;
    let deps = if input.peek(syn::token::Paren) {
        let name = path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        if path.segments.len() == 1 && KINDS.contains(&name.as_str()) {
            return Err(syn::Error::new_spanned(
                &path,
                format!(
                    "a node declared by kind needs an id: write `my_node = {name}(..)`; the kinds are `paladin(..)`, `battalion(..)`, `gate(..)` and `node(..)`, and a bare path names an #[aegis] function"
                ),
            ));
        }
        Some(parse_deps(input, &name)?)
    } else {
        None
    };
    ensure_end(input)?;
    let id = path
        .segments
        .last()
        .map(|s| s.ident.clone())
        .ok_or_else(|| {
            syn::Error::new_spanned(&path, "expected the path of an #[aegis] function")
        })?;
    Ok(NodeDecl {
        override_args,
        worker,
        id,
        kind: NodeKind::Fn(path),
        deps,
    })
}

/// `(instance)` after an `#[aegis]` function `name` that takes a dependency.
fn parse_deps(input: ParseStream<'_>, name: &str) -> syn::Result<Expr> {
    let content;
    let parens = parenthesized!(content in input);
    if content.is_empty() {
        return Err(syn::Error::new(
            parens.span.join(),
            format!(
                "`{name}()` gives the function no dependency: write plain `{name}` for a function without one, or its instance, e.g. `{name}(client.clone())`"
            ),
        ));
    }
    let instance: Expr = content.parse()?;
    if content.peek(Token![,]) {
        content.parse::<Token![,]>()?;
    }
    if !content.is_empty() {
        return Err(content.error(format!(
            "`{name}(..)` takes one instance, the dependency its function takes first: for several, make the dependency a struct holding them"
        )));
    }
    Ok(instance)
}

fn ensure_end(input: ParseStream<'_>) -> syn::Result<()> {
    if input.is_empty() {
        Ok(())
    } else {
        Err(input.error("unexpected tokens: separate nodes with `,`"))
    }
}

/// What follows `id =`: a kind, or an `#[aegis]` function's path with the
/// instance of its dependency, if it takes one.
fn parse_kind(input: ParseStream<'_>) -> syn::Result<(NodeKind, Option<Expr>)> {
    let is_kind = input.peek(Ident) && input.peek2(syn::token::Paren) && {
        // `id = answer(instance)` is a function with its dependency, unless
        // the name is a kind or a typo of one (`self::paladn(..)` is a
        // function so named).
        let fork = input.fork();
        let name = fork
            .parse::<Ident>()
            .map(|i| i.to_string())
            .unwrap_or_default();
        KINDS.contains(&name.as_str()) || !did_you_mean(&name, KINDS).is_empty()
    };
    if !is_kind {
        let path: syn::Path = input.parse()?;
        let deps = if input.peek(syn::token::Paren) {
            let name = path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            Some(parse_deps(input, &name)?)
        } else {
            None
        };
        ensure_end(input)?;
        return Ok((NodeKind::Fn(path), deps));
    }
    let kind: Ident = input.parse()?;
    let content;
    parenthesized!(content in input);
    let parsed = match kind.to_string().as_str() {
        "paladin" => {
            let paladin: Expr = content.parse()?;
            content.parse::<Token![,]>()?;
            let template: LitStr = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected the input template, e.g. `\"Answer: {question}\" -> answer`",
                )
            })?;
            content.parse::<Token![->]>().map_err(|e| {
                syn::Error::new(e.span(), "expected `-> output_field` after the template")
            })?;
            let output = content.call(Ident::parse_any)?;
            let mut task_independent = false;
            if content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
                if !content.is_empty() {
                    let flag: Ident = content.parse()?;
                    if flag != "task_independent" {
                        return Err(syn::Error::new(
                            flag.span(),
                            "expected `task_independent` (a worker template whose prompt is the same for every task) or `)`",
                        ));
                    }
                    task_independent = true;
                    if content.peek(Token![,]) {
                        content.parse::<Token![,]>()?;
                    }
                }
            }
            NodeKind::Paladin {
                paladin,
                template,
                output,
                task_independent,
            }
        }
        "battalion" => {
            let child: Expr = content.parse()?;
            let mut inputs = None;
            let mut outputs = None;
            while content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
                if content.is_empty() {
                    break;
                }
                let which: Ident = content.parse()?;
                let slot = match which.to_string().as_str() {
                    "inputs" => &mut inputs,
                    "outputs" => &mut outputs,
                    other => {
                        return Err(syn::Error::new(
                            which.span(),
                            format!(
                                "unexpected `{other}`{}: a battalion takes `inputs(parent -> child, ..)` and `outputs(child -> parent, ..)`",
                                did_you_mean(other, ["inputs", "outputs"])
                            ),
                        ));
                    }
                };
                if slot.is_some() {
                    return Err(syn::Error::new(
                        which.span(),
                        format!("`{which}` is given twice: merge them"),
                    ));
                }
                let pairs;
                parenthesized!(pairs in content);
                let list =
                    Punctuated::<(Ident, Ident), Token![,]>::parse_terminated_with(&pairs, |p| {
                        let from = p.call(Ident::parse_any)?;
                        p.parse::<Token![->]>()?;
                        Ok((from, p.call(Ident::parse_any)?))
                    })?;
                *slot = Some(list.into_iter().collect());
            }
            NodeKind::Battalion {
                child,
                inputs: inputs.unwrap_or_default(),
                outputs: outputs.unwrap_or_default(),
            }
        }
        "gate" | "node" => {
            let spec: Expr = content.parse()?;
            if content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
            }
            if !content.is_empty() {
                return Err(content.error(format!(
                    "`{kind}(..)` takes one expression: the node's `NodeSpec`"
                )));
            }
            if kind == "gate" {
                NodeKind::Gate(spec)
            } else {
                NodeKind::Spec(spec)
            }
        }
        other => {
            return Err(syn::Error::new(
                kind.span(),
                format!(
                    "unknown node kind `{other}`{}: the kinds are `paladin(..)`, `battalion(..)`, `gate(..)` and `node(..)`, and a bare path names an #[aegis] function",
                    did_you_mean(other, KINDS)
                ),
            ));
        }
    };
    if !content.is_empty() {
        return Err(content.error("unexpected tokens at the end of this node"));
    }
    ensure_end(input)?;
    Ok((parsed, None))
}

/// One side of an edge: a node or a `[list]` of them.
pub(crate) type Group = Vec<Ident>;

/// `a -> b -> [c, d]` or `a ?> "evaluator" -> [x, y]`.
pub(crate) enum EdgeStmt {
    Chain(Vec<Group>),
    Conditional {
        from: Ident,
        evaluator: LitStr,
        targets: Group,
    },
}

fn parse_group(input: ParseStream<'_>) -> syn::Result<Group> {
    if input.peek(syn::token::Bracket) {
        let content;
        bracketed!(content in input);
        let list =
            Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, Ident::parse_any)?;
        if list.is_empty() {
            return Err(content.error("an empty `[]` connects nothing: list at least one node"));
        }
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![input.call(Ident::parse_any)?])
    }
}

pub(crate) fn parse_edge(input: ParseStream<'_>) -> syn::Result<EdgeStmt> {
    let first = parse_group(input)?;
    if input.peek(Token![?]) {
        let question: Token![?] = input.parse()?;
        input.parse::<Token![>]>()?;
        let [from] = <[Ident; 1]>::try_from(first).map_err(|_| {
            syn::Error::new(
                question.span,
                "conditional edges start at one node: `a ?> \"evaluator\" -> [x, y]`",
            )
        })?;
        let evaluator: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the evaluator's registered name: `a ?> \"evaluator\" -> [x, y]`",
            )
        })?;
        input.parse::<Token![->]>()?;
        let targets = parse_group(input)?;
        if !input.is_empty() {
            return Err(input.error("a conditional edge ends at its targets: put further edges in their own `;` statement"));
        }
        return Ok(EdgeStmt::Conditional {
            from,
            evaluator,
            targets,
        });
    }
    let mut chain = vec![first];
    while !input.is_empty() {
        input.parse::<Token![->]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected `->` between nodes; separate edge statements with `;`",
            )
        })?;
        chain.push(parse_group(input)?);
    }
    if chain.len() < 2 {
        return Err(syn::Error::new(
            chain[0][0].span(),
            "an edge needs a target: write `a -> b`",
        ));
    }
    Ok(EdgeStmt::Chain(chain))
}

pub(crate) fn parse_dynamic(input: ParseStream<'_>) -> syn::Result<Ident> {
    let id = input.call(Ident::parse_any)?;
    ensure_end(input)?;
    Ok(id)
}

/// `planner -> answer` in `musters { .. }`: the node that musters, and the
/// worker template its tasks run.
pub(crate) struct MusterDecl {
    pub(crate) from: Ident,
    pub(crate) worker: Ident,
}

pub(crate) fn parse_muster(input: ParseStream<'_>) -> syn::Result<MusterDecl> {
    let from = input.call(Ident::parse_any)?;
    input.parse::<Token![->]>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected `{from} -> <worker template>`: a muster names the node that musters and the worker its tasks run"),
        )
    })?;
    let worker = input.call(Ident::parse_any)?;
    if !input.is_empty() {
        return Err(input.error("a muster is one `node -> worker` pair: separate musters with `,`"));
    }
    Ok(MusterDecl { from, worker })
}

/// `name_of` for spans and messages alike.
pub(crate) fn id_of(ident: &Ident) -> String {
    name_of(ident)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn node(tokens: TokenStream) -> syn::Result<NodeDecl> {
        parse_node.parse2(tokens)
    }

    #[test]
    fn worker_is_a_modifier_only_before_a_node() {
        let n = node(quote!(worker score)).unwrap();
        assert!(n.worker.is_some());
        assert_eq!(n.id, "score");
        let n = node(quote!(worker)).unwrap();
        assert!(n.worker.is_none(), "a function may be called `worker`");
        assert_eq!(n.id, "worker");
        let n = node(quote!(worker = paladin(p(), "t" -> out))).unwrap();
        assert!(n.worker.is_none());
        assert!(matches!(n.kind, NodeKind::Paladin { .. }));
        let n = node(quote!(#[aegis(retry)] worker nodes::score)).unwrap();
        assert!(n.worker.is_some() && n.override_args.is_some());
        assert!(matches!(n.kind, NodeKind::Fn(ref p) if p.segments.len() == 2));
    }

    #[test]
    fn parses_every_node_kind() {
        let n = node(quote!(sub = battalion(child(), inputs(a -> b, c -> d), outputs(x -> y))))
            .unwrap();
        let NodeKind::Battalion {
            inputs, outputs, ..
        } = n.kind
        else {
            panic!("not a battalion")
        };
        assert_eq!((inputs.len(), outputs.len()), (2, 1));
        assert!(matches!(
            node(quote!(g = gate(spec()))).unwrap().kind,
            NodeKind::Gate(_)
        ));
        assert!(matches!(
            node(quote!(n = node(spec()))).unwrap().kind,
            NodeKind::Spec(_)
        ));
        let n = node(quote!(booker = book)).unwrap();
        assert_eq!(n.id, "booker");
        assert!(matches!(n.kind, NodeKind::Fn(_)));
        assert!(
            node(quote!(paladin(p(), "t" -> out))).is_err(),
            "a kind needs an id"
        );
        assert!(node(quote!(x = battalion(c(), sideways(a -> b)))).is_err());
        assert!(
            node(quote!(
                #[serde]
                x
            ))
            .is_err()
        );
    }

    #[test]
    fn a_function_takes_the_instance_of_its_dependency() {
        let n = node(quote!(answer(researcher.clone()))).unwrap();
        assert_eq!(n.id, "answer");
        assert!(matches!(n.kind, NodeKind::Fn(_)));
        assert!(matches!(n.deps, Some(Expr::MethodCall(_))));
        let n = node(quote!(#[aegis(retry)] worker nodes::answer(Arc::new(C {}),))).unwrap();
        assert!(n.worker.is_some() && n.override_args.is_some() && n.deps.is_some());
        assert_eq!(n.id, "answer");
        let n = node(quote!(asker = ask(client))).unwrap();
        assert_eq!(n.id, "asker");
        assert!(matches!(n.kind, NodeKind::Fn(ref p) if p.is_ident("ask")));
        assert!(n.deps.is_some());
        let n = node(quote!(asker = nodes::ask(client))).unwrap();
        assert!(n.deps.is_some());
        // A typo of a kind is still one, unless written as a path.
        assert!(node(quote!(x = paladn(1))).is_err());
        assert!(node(quote!(x = self::paladn(1))).unwrap().deps.is_some());
        assert!(node(quote!(book)).unwrap().deps.is_none());
        assert!(node(quote!(g = gate(spec()))).unwrap().deps.is_none());

        let message = |tokens| {
            node(tokens)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(message(quote!(answer())).contains("`answer()` gives the function no dependency"));
        assert!(message(quote!(answer(a, b))).contains("`answer(..)` takes one instance"));
        assert!(message(quote!(a = answer(x) extra)).contains("separate nodes with `,`"));
    }

    #[test]
    fn parses_edge_chains_and_conditionals() {
        let EdgeStmt::Chain(groups) = parse_edge
            .parse2(quote!(START -> a -> [b, c] -> END))
            .unwrap()
        else {
            panic!("not a chain")
        };
        assert_eq!(
            groups.iter().map(Vec::len).collect::<Vec<_>>(),
            [1, 1, 2, 1]
        );
        let EdgeStmt::Conditional {
            from,
            evaluator,
            targets,
        } = parse_edge.parse2(quote!(a ?> "pick" -> [x, END])).unwrap()
        else {
            panic!("not conditional")
        };
        assert_eq!(from, "a");
        assert_eq!(evaluator.value(), "pick");
        assert_eq!(targets.len(), 2);
        assert!(parse_edge.parse2(quote!(a)).is_err());
        assert!(parse_edge.parse2(quote!([a, b] ?> "x" -> c)).is_err());
        assert!(parse_edge.parse2(quote!(a -> [])).is_err());
    }

    #[test]
    fn parses_one_muster_pair_per_item() {
        let m = parse_muster.parse2(quote!(planner -> answer)).unwrap();
        assert_eq!(
            (m.from.to_string(), m.worker.to_string()),
            ("planner".into(), "answer".into())
        );
        assert!(parse_muster.parse2(quote!(planner)).is_err());
        assert!(parse_muster.parse2(quote!(planner -> a -> b)).is_err());
    }

    #[test]
    fn parses_field_modifiers_in_any_order() {
        let f = parse_field
            .parse2(quote!(log: Append cache = deny = [] required))
            .unwrap();
        assert_eq!(f.rule, Rule::Append);
        assert!(f.cache_deny && f.required && f.default.is_some());
        assert!(parse_field.parse2(quote!(x: LastWrite = 1 = 2)).is_err());
    }

    #[test]
    fn splits_items_at_top_level_separators_only() {
        let mut errors = Errors::new();
        let items = parse_items(
            &quote!(a: Append = [1, 2], b: Merge = { "k": 1, "j": 2 },),
            ',',
            &mut errors,
            parse_field,
        );
        assert!(errors.is_empty());
        assert_eq!(items.len(), 2);
        let items = parse_items(&quote!(a: Nope, b: Sum), ',', &mut errors, parse_field);
        assert_eq!(items.len(), 1, "a broken item does not hide the next");
        assert_eq!(errors.len(), 1);
    }
}
