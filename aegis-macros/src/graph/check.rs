//! `graph!`'s cross-reference checks: everything the guide's validation
//! rejects that the tokens of one `graph!` already show, and (through
//! [`Site::Attribute`]) what an `#[aegis]` function's own attribute names.

use proc_macro2::Span;
use std::collections::BTreeMap;
use syn::Ident;

use super::parse::{
    EdgeStmt, FieldDecl, GraphInput, MusterDecl, NodeDecl, NodeKind, Rule, Sections, sections,
};
use crate::errors::Errors;
use crate::names::{
    RESERVED_IDS, STD_MACROS, did_you_mean, did_you_mean_endpoint, field_name_problem, name_of,
};
use crate::policy::{self, AegisSpec, CacheKey, Handler};
use crate::template::template_fields;

/// A node and its own Aegis from graph!, if it has one.
pub(crate) struct Node {
    pub(crate) decl: NodeDecl,
    pub(crate) own: Option<AegisSpec>,
}

/// A graph as graph! declares it. Its problems are in [`Checked::errors`]:
/// it is expanded into builder calls only when there are none, and with
/// some it still names the `#[aegis]` functions whose own checks run.
pub(crate) struct Graph {
    pub(crate) krate: Option<syn::Path>,
    pub(crate) limits: Option<syn::Expr>,
    pub(crate) fields: Vec<FieldDecl>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) default_aegis: Option<AegisSpec>,
    pub(crate) edges: Vec<EdgeStmt>,
    pub(crate) dynamic: Vec<Ident>,
    pub(crate) musters: Vec<MusterDecl>,
    /// What is left of the check for nodes nothing leads to (see
    /// [`Unreached`]) once graph!'s own tokens are read.
    pub(crate) unreached: Unreached,
    /// Whether every field (node) parsed; see [`Scope`].
    fields_complete: bool,
    nodes_complete: bool,
}

/// Whether `name` is START, END or their runtime ids, which no node takes.
pub(crate) fn is_reserved(name: &str) -> bool {
    name == "START" || name == "END" || RESERVED_IDS.contains(&name)
}

/// A parsed graph and every problem its own tokens show.
pub(crate) struct Checked {
    pub(crate) graph: Graph,
    pub(crate) errors: Errors,
}

/// What the checks look names up in.
pub(crate) struct Scope<'a> {
    /// Each field's rule, and the span of the rule as written.
    fields: BTreeMap<String, (Rule, Span)>,
    nodes: BTreeMap<String, &'a NodeDecl>,
    /// Whether every field (node) parsed: when one did not, its error is
    /// already reported and "undeclared" would only echo it.
    fields_complete: bool,
    nodes_complete: bool,
}

impl<'a> Scope<'a> {
    /// The names `fields` and `decls` declare; reports a field or node
    /// declared twice, a reserved node name and an invalid field name.
    fn build(
        fields: &[FieldDecl],
        decls: impl IntoIterator<Item = &'a NodeDecl>,
        (fields_complete, nodes_complete): (bool, bool),
        errors: &mut Errors,
    ) -> Self {
        let mut scope = Scope {
            fields: BTreeMap::new(),
            nodes: BTreeMap::new(),
            fields_complete,
            nodes_complete,
        };
        for field in fields {
            let name = name_of(&field.name);
            if let Some(problem) = field_name_problem(&name) {
                errors.error(
                    field.name.span(),
                    format!("`{name}` is not a valid field name: {problem}"),
                );
            }
            if scope
                .fields
                .insert(name.clone(), (field.rule, field.rule_span))
                .is_some()
            {
                errors.error(
                    field.name.span(),
                    format!("field `{name}` is declared twice: keep one declaration"),
                );
            }
        }
        for decl in decls {
            let name = name_of(&decl.id);
            if is_reserved(&name) {
                errors.error(
                    decl.id.span(),
                    format!(
                        "`{name}` names the graph's virtual entry or exit: choose another node name"
                    ),
                );
            } else if scope.nodes.insert(name.clone(), decl).is_some() {
                errors.error(
                    decl.id.span(),
                    format!("node `{name}` is declared twice: each node is declared once (give the second another id)"),
                );
            }
        }
        scope
    }

    /// The names a checked graph declares.
    pub(crate) fn of(graph: &'a Graph) -> Self {
        Scope::build(
            &graph.fields,
            graph.nodes.iter().map(|n| &n.decl),
            (graph.fields_complete, graph.nodes_complete),
            &mut Errors::new(),
        )
    }

    fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    fn field_names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }

    /// Reports `field` unless the schema declares it; else its rule and
    /// the rule's span.
    fn require_field(
        &self,
        field: &Ident,
        what: &str,
        site: Site<'_>,
        errors: &mut Errors,
    ) -> Option<(Rule, Span)> {
        let name = name_of(field);
        let rule = self.fields.get(&name).copied();
        if rule.is_none() && self.fields_complete {
            errors.error(
                site.at(field.span()),
                format!(
                    "{what} `{name}`{} is not in this graph's schema: declare it in `schema {{ .. }}`, e.g. `{name}: LastWrite`{}",
                    site.of(),
                    did_you_mean(&name, self.field_names())
                ),
            );
        }
        rule
    }

    /// Reports `id` unless it is a declared node.
    fn require_node(&self, id: &Ident, what: &str, site: Site<'_>, errors: &mut Errors) -> bool {
        self.require_endpoint(id, what, &[], site, errors)
    }

    /// Reports `id` unless it is a declared node; the suggestion weighs
    /// the `virtuals` (`START`, `END`) this place can take too.
    fn require_endpoint(
        &self,
        id: &Ident,
        what: &str,
        virtuals: &[&str],
        site: Site<'_>,
        errors: &mut Errors,
    ) -> bool {
        let name = name_of(id);
        let known = self.nodes.contains_key(&name);
        if !known && self.nodes_complete {
            errors.error(
                site.at(id.span()),
                format!(
                    "{what} `{name}`{} is not a node of this graph: declare it in `nodes {{ .. }}`{}",
                    site.of(),
                    did_you_mean_endpoint(&name, self.node_names(), virtuals)
                ),
            );
        }
        known
    }
}

/// Where the Aegis being checked was written.
#[derive(Clone, Copy)]
pub(crate) enum Site<'a> {
    /// In this graph!: `default_aegis` or a node's `#[aegis(..)]`.
    Graph,
    /// In the `#[aegis(..)]` attribute of the function `fn_name`, which
    /// this graph names at `anchor`. The attribute's tokens reach graph!
    /// through the function's descriptor macro (see `attr::descriptor`).
    Attribute {
        fn_name: &'a str,
        anchor: Span,
        /// Whether the function is in the crate graph! expands in. An
        /// error in another crate's file would not say which graph! it is
        /// about, and an IDE would not show it: such errors point at
        /// `anchor`, and their message names the attribute's token.
        local: bool,
    },
}

impl Site<'_> {
    /// Where an error about `token` is reported. An attribute token came
    /// through a `macro_rules!` expansion, so it is re-anchored at the
    /// user's own span (`anchor`'s): the error shows at the token, as a
    /// plain error, with no "this error originates in the macro" note.
    pub(crate) fn at(self, token: Span) -> Span {
        match self {
            Site::Graph => token,
            Site::Attribute {
                anchor,
                local: true,
                ..
            } => anchor.located_at(token),
            Site::Attribute { anchor, .. } => anchor,
        }
    }

    /// `" (in the #[aegis] of `book`)"` for an attribute; nothing in graph!.
    fn of(self) -> String {
        match self {
            Site::Graph => String::new(),
            Site::Attribute { fn_name, .. } => format!(" (in the #[aegis] of `{fn_name}`)"),
        }
    }
}

/// graph!'s input read in full: its sections parsed, then checked.
pub(crate) fn parse_and_check(input: GraphInput) -> Checked {
    let mut errors = Errors::new();
    let sections = sections(input, &mut errors);
    check(sections, errors)
}

/// Runs every check graph!'s own tokens allow on its parsed sections,
/// adding to the problems their parsing found. The graph comes back even
/// when there are errors, so the checks of the `#[aegis]` functions it
/// names can still run and be reported with them.
fn check(sections: Sections, mut errors: Errors) -> Checked {
    let Sections {
        input,
        fields,
        decls,
        edges,
        dynamic,
        musters,
        fields_complete,
        nodes_complete,
    } = sections;
    let default_aegis = input.default_aegis.as_ref().map(|s| {
        let spec = policy::parse_and_validate(s.content.clone(), &mut errors);
        reject_attribute_only_keys(&spec, "default_aegis", &mut errors);
        spec
    });

    let scope = Scope::build(
        &fields,
        &decls,
        (fields_complete, nodes_complete),
        &mut errors,
    );

    let mut owns = Vec::new();
    for decl in &decls {
        let own = decl.override_args.as_ref().map(|(_, tokens)| {
            let spec = policy::parse_and_validate(tokens.clone(), &mut errors);
            reject_attribute_only_keys(&spec, "a graph! node's #[aegis(..)]", &mut errors);
            spec
        });
        if let Some(spec) = &own {
            let owner = Owner {
                decl,
                id: name_of(&decl.id),
            };
            check_policy(spec, Some(&owner), &scope, Site::Graph, &mut errors);
        }
        check_node(decl, &scope, &mut errors);
        owns.push(own);
    }
    if let Some(default) = &default_aegis {
        check_policy(default, None, &scope, Site::Graph, &mut errors);
        for (decl, own) in decls.iter().zip(&owns) {
            if own.is_none() {
                check_default_applies(default, decl, &mut errors);
            }
        }
    }

    check_edges(
        &edges,
        &dynamic,
        &scope,
        input.edges.as_ref().map(|s| s.key.span()),
        &mut errors,
    );

    check_musters(&musters, &scope, &mut errors);

    drop(scope);
    // On a graph with mistakes of its own, a node nothing leads to is as
    // likely an echo of one (an edge to a misspelt name) as a mistake.
    let unreached = if errors.is_empty() {
        unreached(&decls, &owns, default_aegis.as_ref(), &edges, &dynamic)
    } else {
        Unreached::default()
    };
    if unreached.attributes.is_empty() {
        for id in &unreached.nodes {
            errors.push(unreached_error(id));
        }
    }
    let graph = Graph {
        krate: input.krate,
        limits: input.limits,
        fields,
        nodes: decls
            .into_iter()
            .zip(owns)
            .map(|(decl, own)| Node { decl, own })
            .collect(),
        default_aegis,
        edges,
        dynamic,
        musters,
        unreached,
        fields_complete,
        nodes_complete,
    };
    Checked { graph, errors }
}

/// The nodes of a graph that nothing visible in graph! leads to, and the
/// functions whose attributes could still: an edge, a route, a `dynamic`
/// mark or a muster (of a worker template) makes a node reachable, and
/// an `#[aegis]` function's attribute may route to one. graph! sees that
/// attribute only through the function's descriptor, so with `nodes`
/// left and `attributes` to read, the descriptors of `attributes` are
/// called in a chain (`graph::node_fn`), the last link reporting the
/// nodes none routes to.
#[derive(Default)]
pub(crate) struct Unreached {
    /// The nodes no edge, route or `dynamic` mark in graph! leads to.
    pub(crate) nodes: Vec<Ident>,
    /// The indices of the function nodes whose own attribute is their
    /// Aegis (graph! gives them none), which may route to `nodes`.
    pub(crate) attributes: Vec<usize>,
}

/// How many attributes the chain may read: each is two nested macro
/// expansions, and rustc's default recursion limit is 128. A graph with
/// more leaves the check to `WarGraph::validate`.
const MAX_ATTRIBUTES_READ: usize = 32;

/// The nodes nothing in graph! leads to; see [`Unreached`].
fn unreached(
    decls: &[NodeDecl],
    owns: &[Option<AegisSpec>],
    default_aegis: Option<&AegisSpec>,
    edges: &[EdgeStmt],
    dynamic: &[Ident],
) -> Unreached {
    // A Gate's approve and reject targets are in its `NodeSpec`, an
    // expression graph! cannot read; `node(..)` may hold a Gate too.
    if decls
        .iter()
        .any(|d| matches!(d.kind, NodeKind::Gate(_) | NodeKind::Spec(_)))
    {
        return Unreached::default();
    }
    let route_of = |spec: &AegisSpec| match spec.on_error.as_ref().map(|k| &k.value) {
        Some(Handler::Route { to, .. }) => Some(name_of(to)),
        _ => None,
    };
    let mut led_to: Vec<String> = dynamic.iter().map(name_of).collect();
    for edge in edges {
        match edge {
            EdgeStmt::Chain(groups) => {
                led_to.extend(groups.iter().skip(1).flatten().map(name_of));
            }
            EdgeStmt::Conditional { targets, .. } => led_to.extend(targets.iter().map(name_of)),
        }
    }
    led_to.extend(
        owns.iter()
            .flatten()
            .chain(default_aegis)
            .filter_map(route_of),
    );
    let nodes: Vec<Ident> = decls
        .iter()
        .filter(|d| d.worker.is_none() && !led_to.contains(&name_of(&d.id)))
        .map(|d| d.id.clone())
        .collect();
    if nodes.is_empty() {
        return Unreached::default();
    }
    let attributes: Vec<usize> = decls
        .iter()
        .zip(owns)
        .enumerate()
        .filter(|(_, (d, own))| {
            own.is_none() && matches!(&d.kind, NodeKind::Fn(path) if !names_a_std_macro(path))
        })
        .map(|(i, _)| i)
        .collect();
    if attributes.len() > MAX_ATTRIBUTES_READ {
        return Unreached::default();
    }
    Unreached { nodes, attributes }
}

/// Whether `path` ends in a standard macro's name: `#[aegis]` refuses
/// such a function and gives it no descriptor (see `names::STD_MACROS`).
pub(crate) fn names_a_std_macro(path: &syn::Path) -> bool {
    path.segments
        .last()
        .is_some_and(|s| STD_MACROS.contains(&name_of(&s.ident).as_str()))
}

/// The error for a node nothing leads to, at its declaration.
pub(crate) fn unreached_error(id: &Ident) -> syn::Error {
    let name = name_of(id);
    syn::Error::new(
        id.span(),
        format!(
            "`{name}` has no edge into it, so it would never run: add an edge to it in `edges {{ .. }}`, or, if a node reaches it with `Directive::goto`, list it in `dynamic {{ {name} }}`"
        ),
    )
}

fn reject_attribute_only_keys(spec: &AegisSpec, place: &str, errors: &mut Errors) {
    if let Some((_, _, key)) = &spec.id {
        errors.error(
            *key,
            format!("`id` cannot be set in {place}: in graph! a node's id is the name it is declared under"),
        );
    }
    if let Some((_, key)) = &spec.krate {
        errors.error(
            *key,
            format!(
                "`crate` cannot be set in {place}: write `crate = \"..\";` at the top of graph!"
            ),
        );
    }
}

/// The node an Aegis is attached to: its declaration, and its id as the
/// runtime will see it (for an attribute, the attribute's `id`).
pub(crate) struct Owner<'a> {
    pub(crate) decl: &'a NodeDecl,
    pub(crate) id: String,
}

/// The names an Aegis uses, and the node kind it is attached to; `owner`
/// is `None` for `default_aegis`.
pub(crate) fn check_policy(
    spec: &AegisSpec,
    owner: Option<&Owner<'_>>,
    scope: &Scope<'_>,
    site: Site<'_>,
    errors: &mut Errors,
) {
    if let Some(k) = &spec.on_error {
        match &k.value {
            Handler::Route { to, error_field } => {
                let target = name_of(to);
                if scope.require_node(to, "route target", site, errors)
                    && scope.nodes.get(&target).is_some_and(|d| d.worker.is_some())
                {
                    errors.error(
                        site.at(to.span()),
                        format!("route target `{target}`{} is a worker template, which runs only as mustered tasks: route to a regular node", site.of()),
                    );
                }
                let rule = match (error_field, owner) {
                    (Some(field), _) => scope
                        .require_field(field, "error field", site, errors)
                        .map(|rule| (rule, name_of(field), site.at(field.span()))),
                    (None, Some(owner)) => {
                        let field = format!("{}_error", owner.id);
                        match scope.fields.get(&field) {
                            Some(rule) => Some((*rule, field, site.at(k.key))),
                            None => {
                                let in_its = match site {
                                    Site::Graph => "",
                                    Site::Attribute { .. } => " in its #[aegis]",
                                };
                                errors.error(
                                    site.at(k.key),
                                    format!(
                                        "`{}` routes its error to `{field}` (`on_error(route = {target})` without `error_field` writes to `<node id>_error`), which this graph's schema does not declare: add `{field}: LastWrite` to `schema {{ .. }}`, or set `error_field = ..`{in_its}",
                                        owner.id
                                    ),
                                );
                                None
                            }
                        }
                    }
                    (None, None) => {
                        errors.error(
                            k.key,
                            "default_aegis applies to every node, so its route needs one error field for all of them: write `on_error(route = <node>, error_field = <field>)`",
                        );
                        None
                    }
                };
                if let Some(((Rule::Sum, rule_span), field, span)) = rule {
                    // In graph! the field is named next to the route; an
                    // attribute may serve many graphs, so its error is on
                    // the `Sum` of the graph it does not fit.
                    let (span, here) = match site {
                        Site::Graph => (span, ""),
                        Site::Attribute { .. } => (rule_span, " here"),
                    };
                    errors.error(
                        span,
                        format!("error field `{field}`{} is declared `Sum`{here}, and a serialised error cannot be summed: declare it `LastWrite`, `Append` or `Merge`", site.of()),
                    );
                }
                if let Some(owner) = owner
                    && owner.decl.worker.is_some()
                {
                    let message = match site {
                        Site::Graph => format!(
                            "`{}` is a worker template, and a mustered task cannot be routed (`on_error(route = {target})`): use `on_error(absorb(..))` or a custom handler, or handle the failure at the aggregator",
                            owner.id
                        ),
                        Site::Attribute { fn_name, .. } => format!(
                            "`{fn_name}` is declared a worker template, and its #[aegis] routes failures to `{target}` (`on_error(route = {target})`): a mustered task cannot be routed, so use `on_error(absorb(..))` or a custom handler, or handle the failure at the aggregator"
                        ),
                    };
                    errors.error(site.at(k.key), message);
                }
            }
            Handler::Absorb(writes) => {
                for (field, _) in writes {
                    scope.require_field(field, "absorbed field", site, errors);
                }
            }
            Handler::Custom(_) => {}
        }
    }
    if let Some(k) = &spec.cache
        && let CacheKey::Fields(fields) = &k.value.key
    {
        for field in fields {
            scope.require_field(field, "cache key field", site, errors);
        }
    }
    // Battalions and Gates are declared in graph!, so only graph!'s own
    // Aegis can land on one.
    let Some(Owner { decl: node, id }) = owner else {
        return;
    };
    match node.kind {
        NodeKind::Battalion { .. } => {
            for (key, part) in [
                (spec.retry.as_ref().map(|k| k.key), "retry"),
                (spec.cache.as_ref().map(|k| k.key), "cache"),
            ] {
                if let Some(key) = key {
                    errors.error(
                        key,
                        format!(
                            "`{id}` is a Battalion, which takes no `{part}`: its child run's waypoints are durable state, so a repeated or cached child run has no safe meaning; remove `{part}` (a Battalion takes `timeout` and `on_error`)"
                        ),
                    );
                }
            }
        }
        NodeKind::Gate(_) => {
            for (key, part) in policy_parts(spec) {
                errors.error(
                    key,
                    format!(
                        "`{id}` is a Gate, which takes no Aegis (no `{part}`): it has no attempt to retry, time or cache, and its expiry is its Parley `on_expire` policy; remove `{part}`"
                    ),
                );
            }
        }
        _ => {}
    }
}

fn policy_parts(spec: &AegisSpec) -> Vec<(Span, &'static str)> {
    [
        (spec.retry.as_ref().map(|k| k.key), "retry"),
        (spec.timeout.as_ref().map(|k| k.key), "timeout"),
        (spec.on_error.as_ref().map(|k| k.key), "on_error"),
        (spec.cache.as_ref().map(|k| k.key), "cache"),
    ]
    .into_iter()
    .filter_map(|(key, part)| key.map(|k| (k, part)))
    .collect()
}

/// `default_aegis` governs every node without its own Aegis, so the
/// support matrix applies to it per node.
fn check_default_applies(default: &AegisSpec, node: &NodeDecl, errors: &mut Errors) {
    let id = name_of(&node.id);
    let opt_out =
        format!("opt `{id}` out with a bare `#[aegis]` on its declaration (its own, empty Aegis)");
    match node.kind {
        NodeKind::Battalion { .. } => {
            for (key, part) in [
                (default.retry.as_ref().map(|k| k.key), "retry"),
                (default.cache.as_ref().map(|k| k.key), "cache"),
            ] {
                if let Some(key) = key {
                    errors.error(
                        key,
                        format!("default_aegis sets `{part}`, which the Battalion `{id}` would get and cannot take: {opt_out} or give it its own `#[aegis(..)]` without `{part}`"),
                    );
                }
            }
        }
        NodeKind::Gate(_) => {
            if let Some((key, part)) = policy_parts(default).first() {
                errors.error(
                    *key,
                    format!("default_aegis (here `{part}`) would apply to the Gate `{id}`, which takes no Aegis: {opt_out}"),
                );
            }
        }
        NodeKind::Paladin { .. } | NodeKind::Spec(_) if node.worker.is_some() => {
            if let Some(k) = &default.on_error
                && matches!(k.value, Handler::Route { .. })
            {
                errors.error(
                    k.key,
                    format!("default_aegis routes failures, and the worker template `{id}` would get it, but a mustered task cannot be routed: {opt_out} or give it its own `#[aegis(..)]`"),
                );
            }
        }
        _ => {}
    }
}

fn check_node(decl: &NodeDecl, scope: &Scope<'_>, errors: &mut Errors) {
    match &decl.kind {
        NodeKind::Paladin {
            template,
            output,
            task_independent,
            ..
        } => {
            scope.require_field(output, "output field", Site::Graph, errors);
            match template_fields(&template.value()) {
                Ok(names) => {
                    let id = &decl.id;
                    let reads_task = names.iter().any(|n| n.starts_with("task."));
                    match (decl.worker.is_some(), reads_task) {
                        (false, true) => errors.error(
                            template.span(),
                            format!("the input template reads the task (`{{task.…}}`), but `{id}` is not a worker template, so it never runs as a task: declare it `worker {id} = paladin(..)`"),
                        ),
                        (true, false) if !task_independent => errors.error(
                            template.span(),
                            format!("the worker template `{id}` renders the same prompt for every task: read the task with `{{task.key}}` or `{{task.<field>}}`, or add `, task_independent` after the output field if that is intended"),
                        ),
                        _ => {}
                    }
                    for name in names {
                        if name.starts_with("task.") {
                            continue;
                        }
                        if !scope.fields.contains_key(&name) && scope.fields_complete {
                            errors.error(
                                template.span(),
                                format!(
                                    "the input template names `{{{name}}}`, which is not in this graph's schema: declare `{name}` in `schema {{ .. }}`, or write `{{{{` for a literal brace{}",
                                    did_you_mean(&name, scope.field_names())
                                ),
                            );
                        }
                    }
                }
                Err(()) => errors.error(
                    template.span(),
                    "the input template has a `{` without its `}`: close it, or write `{{` for a literal brace",
                ),
            }
        }
        NodeKind::Battalion {
            inputs, outputs, ..
        } => {
            for (parent, _) in inputs {
                scope.require_field(parent, "battalion input", Site::Graph, errors);
            }
            for (_, parent) in outputs {
                scope.require_field(parent, "battalion output", Site::Graph, errors);
            }
        }
        NodeKind::Fn(_) | NodeKind::Gate(_) | NodeKind::Spec(_) => {}
    }
}

const START_IS_NO_TARGET: &str = "START is where the graph begins: no edge leads into it";

fn check_edges(
    edges: &[EdgeStmt],
    dynamic: &[Ident],
    scope: &Scope<'_>,
    edges_key: Option<Span>,
    errors: &mut Errors,
) {
    let mut leaves_start = false;
    for edge in edges {
        match edge {
            EdgeStmt::Chain(groups) => {
                let last = groups.len() - 1;
                for (i, group) in groups.iter().enumerate() {
                    for id in group {
                        if id == "START" {
                            if i > 0 {
                                errors.error(id.span(), START_IS_NO_TARGET);
                            }
                            leaves_start |= i < last;
                        } else if id == "END" {
                            if i < last {
                                errors.error(
                                    id.span(),
                                    "END is where the graph finishes: no edge leaves it",
                                );
                            }
                        } else {
                            // Where the chain can take START or END, a
                            // near miss of it is suggested.
                            let virtuals: &[&str] = match (i == 0, i == last) {
                                (true, _) => &["START"],
                                (_, true) => &["END"],
                                _ => &[],
                            };
                            scope.require_endpoint(
                                id,
                                "edge endpoint",
                                virtuals,
                                Site::Graph,
                                errors,
                            );
                        }
                    }
                }
            }
            EdgeStmt::Conditional {
                from,
                evaluator,
                targets,
            } => {
                if from == "START" || from == "END" {
                    errors.error(
                        from.span(),
                        "conditional edges leave a node: START and END cannot choose; route from a node instead",
                    );
                } else {
                    scope.require_node(from, "edge endpoint", Site::Graph, errors);
                }
                if evaluator.value().trim().is_empty() {
                    errors.error(
                        evaluator.span(),
                        "an empty evaluator name can never be registered: write the name you pass to `WarEngine::with_edge_evaluator`",
                    );
                }
                for to in targets {
                    if to == "START" {
                        errors.error(to.span(), START_IS_NO_TARGET);
                    } else if to != "END" {
                        scope.require_endpoint(to, "edge endpoint", &["END"], Site::Graph, errors);
                    }
                }
            }
        }
    }
    for id in dynamic {
        scope.require_node(id, "dynamic target", Site::Graph, errors);
    }
    if !leaves_start {
        errors.error(
            edges_key.unwrap_or_else(Span::call_site),
            "no edge leaves START, so the graph would never run: add an `edges { START -> first_node; .. }` statement",
        );
    }
}

/// `musters { planner -> answer }`: the node that musters is a declared
/// regular node (a worker template runs only as tasks, which cannot
/// muster), its worker is a declared worker template, and each pair is
/// declared once.
fn check_musters(musters: &[MusterDecl], scope: &Scope<'_>, errors: &mut Errors) {
    let mut seen: Vec<(String, String)> = Vec::new();
    for MusterDecl { from, worker } in musters {
        let (from_name, worker_name) = (name_of(from), name_of(worker));
        if is_reserved(&from_name) {
            errors.error(
                from.span(),
                format!("`{from_name}` is the graph's virtual entry or exit and runs nothing: a muster starts at a node that returns `Directive::muster(..)`"),
            );
        } else if scope.require_node(from, "mustering node", Site::Graph, errors)
            && scope
                .nodes
                .get(&from_name)
                .is_some_and(|d| d.worker.is_some())
        {
            errors.error(
                from.span(),
                format!("`{from_name}` is a worker template, whose tasks may only contribute a delta, so it cannot muster: muster from a regular node"),
            );
        }
        if is_reserved(&worker_name) {
            errors.error(
                worker.span(),
                format!("`{worker_name}` is the graph's virtual entry or exit: a muster runs its tasks on a worker template, declared `worker {worker_name}` in `nodes {{ .. }}`"),
            );
        } else if scope.require_node(worker, "mustered worker", Site::Graph, errors)
            && scope
                .nodes
                .get(&worker_name)
                .is_some_and(|d| d.worker.is_none())
        {
            errors.error(
                worker.span(),
                format!("`{worker_name}` is not a worker template, so no task can run on it: declare it `worker {worker_name}` (or `worker {worker_name} = paladin(..)`) in `nodes {{ .. }}`"),
            );
        }
        let pair = (from_name, worker_name);
        if seen.contains(&pair) {
            errors.error(
                from.span()
                    .join(worker.span())
                    .unwrap_or_else(|| from.span()),
                format!(
                    "the muster `{} -> {}` is declared twice: keep one",
                    pair.0, pair.1
                ),
            );
        } else {
            seen.push(pair);
        }
    }
}
