//! The random graph generator: a plain description of a graph (`GraphDef`)
//! that both the engine-side builder and the reference model read.
//!
//! Graphs are layered: every static edge, conditional target, `Goto` and
//! `Route` target points from a layer to a later one, so a run always ends
//! (no limit is needed to stop it) and the model needs no time. A node may
//! still be activated in several supersteps, through a skip edge.
//!
//! `Shape` picks the layer layout and `Body` what a node is: a scripted
//! Function, a Muster (its tasks run one superstep later on its own worker
//! template, whose edges lead on into the next layer), a Battalion (a
//! small generated child graph of scripted Functions, run as one node in its
//! own thread), or a Gate (the run waits for an answer, then the gate routes
//! into the next layer). The model rules for each are in `model.rs`, the engine-side
//! builder in `chaos.rs` (`build_graph`).

use aegis::prelude::*;

use super::faults::Scope;
use aegis::graph::EngineLimits;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;
use aegis::policy::RetryPredicate;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::time::Duration;

/// The Append field every success and handler writes one token to.
pub(crate) const LOG: &str = "log";
/// The Sum field every merged node delta adds 1 to.
pub(crate) const MERGED: &str = "merged";
/// The Append field Route handlers write the structured error to.
pub(crate) const ERRORS: &str = "errors";
/// A Battalion child's Append field, set from the parent's log on entry: a
/// second visit starts its child from another state (and other cache keys).
pub(crate) const PARENT_LOG: &str = "parent_log";
/// The registered custom error handler's name.
pub(crate) const CUSTOM_HANDLER: &str = "chaos-custom";
/// The registered custom retry predicate's name.
pub(crate) const CUSTOM_PREDICATE: &str = "chaos-pred";
/// The token the default Aegis's Absorb handler writes.
pub(crate) const DEFAULT_ABSORBED: &str = "default:absorbed";
/// A finite run budget far beyond any run's work and waits (about 317
/// years): only an endless backoff (`Duration::MAX`) ever meets it. (The
/// paused clock reaches a deadline past tokio's timer wheel, about 2.2
/// years, in wheel-sized hops, so a far larger one would cost real time.)
pub(crate) const BUDGET: Duration = Duration::from_secs(10_000_000_000);
/// A backoff that is long but representable: the paused clock jumps it.
/// Even 50 nodes of five jittered attempts each wait less than BUDGET.
const HUGE_WAIT: Duration = Duration::from_secs(86_400);

/// The layer layout of a generated graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One node per layer.
    Chain,
    /// Alternating one-node and wide layers: fan-out, then join.
    FanOutJoin,
    /// Layers of random width.
    Layered,
}

/// What a node is.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// A scripted Function node (see `faults.rs`).
    Function,
    /// A scripted Function whose success musters `tasks` tasks (keys `k0`,
    /// `k1`, ..., payload the index) to the worker template `template`.
    Muster { template: usize, tasks: u32 },
    /// A worker template: scripted like a Function, run only as tasks.
    Template,
    /// A child graph run as one node.
    Battalion(Box<GraphDef>),
    /// A human approval point routing to `approve` or `reject` (indices).
    Gate { approve: usize, reject: usize },
}

/// Where a node's own successful directive routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    Edges,
    Goto(usize),
    End,
}

/// One node of a generated graph.
#[derive(Debug, Clone)]
pub(crate) struct NodeDef {
    pub(crate) id: String,
    pub(crate) layer: usize,
    pub(crate) body: Body,
    /// Static successors (node indices).
    pub(crate) succ: Vec<usize>,
    pub(crate) to_end: bool,
    /// Conditional-edge targets, chosen by this node's own evaluator.
    pub(crate) cond: Option<Vec<usize>>,
    pub(crate) next: Next,
    /// The node's own Aegis entry.
    pub(crate) aegis: Option<Aegis>,
}

/// A generated graph and its run settings.
#[derive(Debug, Clone)]
pub(crate) struct GraphDef {
    pub(crate) shape: Shape,
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) entry: Vec<usize>,
    pub(crate) dynamic: BTreeSet<usize>,
    pub(crate) default_aegis: Option<Aegis>,
    pub(crate) limits: EngineLimits,
}

impl GraphDef {
    /// The Aegis governing node `i`: its own, else the default (wholesale).
    pub(crate) fn aegis(&self, i: usize) -> Option<&Aegis> {
        self.nodes[i].aegis.as_ref().or(self.default_aegis.as_ref())
    }

    /// The graph a scope runs: this one, or a Battalion node's child.
    pub(crate) fn scope(&self, scope: Scope) -> &GraphDef {
        match scope {
            Scope::Root => self,
            Scope::Child { parent, .. } => match &self.nodes[parent].body {
                Body::Battalion(child) => child,
                other => panic!("{parent} is a {other:?}, not a Battalion"),
            },
        }
    }

    pub(crate) fn index(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }
}

/// The conditional choice of a node with targets `targets`, seeing a merged
/// log of `log_len` entries: one target, or none (`END`).
pub(crate) fn cond_choice(targets: &[usize], log_len: usize) -> Option<usize> {
    let i = log_len % (targets.len() + 1);
    targets.get(i).copied()
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn layer_sizes(rng: &mut StdRng, shape: Shape, n: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = n;
    let mut wide = false;
    while left > 0 {
        let want = match shape {
            Shape::Chain => 1,
            Shape::FanOutJoin => {
                wide = !wide;
                if wide { rng.random_range(2..=8) } else { 1 }
            }
            Shape::Layered => rng.random_range(1..=6),
        };
        let take = want.min(left);
        sizes.push(take);
        left -= take;
    }
    sizes
}

/// A random retry policy; `endless` allows a `Duration::MAX` backoff (only
/// under a finite run budget, which ends it).
fn random_retry(rng: &mut StdRng, endless: bool) -> RetryPolicy {
    let initial = if endless && rng.random_bool(0.1) {
        Duration::MAX
    } else {
        pick(rng, &[ms(0), ms(10), ms(100), ms(1000), HUGE_WAIT])
    };
    let max_interval = pick(
        rng,
        &[
            initial,
            initial.max(ms(500)),
            initial.max(Duration::from_secs(60)),
            Duration::MAX,
        ],
    );
    let retry_on = match rng.random_range(0..20) {
        0..8 => RetryPredicate::TransientOnly,
        8..13 => RetryPredicate::TransientOrUnknown,
        13..15 => RetryPredicate::Always,
        15 => RetryPredicate::Never,
        _ => RetryPredicate::Custom(CUSTOM_PREDICATE.to_string()),
    };
    RetryPolicy::default()
        .with_max_attempts(rng.random_range(1..=5))
        .with_initial_interval(initial)
        .with_backoff_factor(pick(rng, &[1.0, 1.5, 2.0, 3.0]))
        .with_max_interval(max_interval)
        // Waits move instants, never outcomes: the model needs no time. The
        // engine's jitter seed keeps a seed's instants reproducible.
        .with_jitter(rng.random_bool(0.5))
        .with_retry_on(retry_on)
}

/// Timeouts end in 50 ms and attempt work is whole 100 ms steps, so an
/// attempt never finishes on the very tick a bound fires: the outcome is
/// decided by the script alone.
fn random_timeout(rng: &mut StdRng) -> Option<TimeoutPolicy> {
    // `Duration::MAX` is no bound at all: a hang needs another one.
    let run = rng
        .random_bool(0.7)
        .then(|| pick(rng, &[ms(250), ms(1050), ms(2550), ms(5050), Duration::MAX]));
    let idle = rng
        .random_bool(0.5)
        .then(|| pick(rng, &[ms(250), ms(1050), ms(2550), Duration::MAX]));
    (run.is_some() || idle.is_some()).then_some(
        TimeoutPolicy::default()
            .with_run_timeout(run)
            .with_idle_timeout(idle),
    )
}

fn absorb(token: &str) -> ErrorHandlerSpec {
    let mut fallback_delta = StateDelta::new();
    fallback_delta
        .set(LOG, token)
        .and_then(|d| d.set(MERGED, 1))
        .expect("static fields");
    ErrorHandlerSpec::Absorb { fallback_delta }
}

/// A random Aegis; `route` lists the nodes a Route may target (none for
/// the graph-wide default), `id` names the node for its Absorb token,
/// `endless` allows a `Duration::MAX` backoff.
fn random_aegis(
    rng: &mut StdRng,
    id: Option<&str>,
    route: &[usize],
    ids: &[String],
    endless: bool,
) -> Aegis {
    let on_error = rng.random_bool(0.65).then(|| match rng.random_range(0..3) {
        0 if !route.is_empty() => ErrorHandlerSpec::Route {
            to: NodeId::new(ids[pick(rng, route)].as_str()),
            error_field: FieldName::new(ERRORS).expect("valid"),
        },
        1 | 0 => match id {
            Some(id) => absorb(&format!("{id}:absorbed")),
            None => absorb(DEFAULT_ABSORBED),
        },
        _ => ErrorHandlerSpec::Custom(CUSTOM_HANDLER.to_string()),
    });
    Aegis::new()
        .with_retry(rng.random_bool(0.7).then(|| random_retry(rng, endless)))
        .with_timeout(if rng.random_bool(0.5) {
            random_timeout(rng)
        } else {
            None
        })
        .with_on_error(on_error)
        .with_cache(rng.random_bool(0.3).then(|| {
            CachePolicy::new(
                pick(rng, &[ms(300), Duration::from_secs(3600)]),
                CacheKeySpec::Default,
            )
        }))
}

/// What a root-graph node is.
fn node_body(rng: &mut StdRng) -> Body {
    match rng.random_range(0..100) {
        0..10 => Body::Muster {
            template: usize::MAX, // numbered once the layers are known
            tasks: if rng.random_bool(0.15) {
                // Enough to write progress waypoints mid-superstep.
                rng.random_range(20..=40)
            } else {
                rng.random_range(0..=6)
            },
        },
        10..20 => Body::Battalion(Box::default()),
        20..25 => Body::Gate {
            approve: usize::MAX, // chosen once the next layer is known
            reject: usize::MAX,
        },
        _ => Body::Function,
    }
}

/// A Battalion's child: a chain or a small layered graph of 1-4 scripted
/// Functions under random policies. Its grace may be longer or shorter
/// than its parent's: the engine caps it at the parent's.
fn child(rng: &mut StdRng, parent: &str) -> GraphDef {
    let shape = pick(rng, &[Shape::Chain, Shape::Layered]);
    let n = rng.random_range(1..=4);
    let limits = EngineLimits::default()
        .with_max_concurrency(pick(rng, &[1, 2, 64]))
        .with_shutdown_grace(random_grace(rng))
        // Never the finite BUDGET: the parent's would cut the child first.
        .with_run_timeout(match rng.random_range(0..20) {
            0..15 => None,
            15..18 => Some(Duration::MAX),
            _ => Some(Duration::ZERO),
        });
    layered(rng, &format!("{parent}c"), shape, n, limits, false)
}

impl Default for GraphDef {
    fn default() -> Self {
        GraphDef {
            shape: Shape::Chain,
            nodes: Vec::new(),
            entry: Vec::new(),
            dynamic: BTreeSet::new(),
            default_aegis: None,
            limits: EngineLimits::default(),
        }
    }
}

/// The graph of `seed`.
pub(crate) fn generate(seed: u64) -> GraphDef {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6172_6d79_6f66_6e6f);
    let shape = pick(&mut rng, &[Shape::Chain, Shape::FanOutJoin, Shape::Layered]);
    let n = rng.random_range(5..=50);
    // A zero budget fails every call at once; Duration::MAX is none;
    // BUDGET ends only the endless backoffs it allows. Those run with
    // every activation of their superstep started at once: queued behind
    // an endless wait, an activation would start after the budget.
    let run_timeout = match rng.random_range(0..20) {
        0..12 => None,
        12..14 => Some(Duration::MAX),
        14..19 => Some(BUDGET),
        _ => Some(Duration::ZERO),
    };
    let max_concurrency = if run_timeout == Some(BUDGET) {
        usize::MAX
    } else {
        pick(&mut rng, &[1, 2, 64])
    };
    let limits = EngineLimits::default()
        .with_max_concurrency(max_concurrency)
        .with_shutdown_grace(random_grace(&mut rng))
        .with_run_timeout(run_timeout);
    layered(&mut rng, "n", shape, n, limits, true)
}

/// A shutdown grace, `Duration::MAX` (the attempt finishes under its own
/// bounds) included.
fn random_grace(rng: &mut StdRng) -> Duration {
    pick(rng, &[ms(0), ms(100), ms(1000), ms(5000), Duration::MAX])
}

/// A layered graph of `n` nodes named `{prefix}{i:02}`; `kinds` allows
/// Musters and Battalions (the root graph), else every node is a Function.
fn layered(
    rng: &mut StdRng,
    prefix: &str,
    shape: Shape,
    n: usize,
    limits: EngineLimits,
    kinds: bool,
) -> GraphDef {
    let endless = limits.run_timeout == Some(BUDGET);
    let sizes = layer_sizes(rng, shape, n);
    let mut layers: Vec<Vec<usize>> = Vec::new();
    let mut next_id = 0;
    for size in &sizes {
        layers.push((next_id..next_id + size).collect());
        next_id += size;
    }
    let mut ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i:02}")).collect();
    let mut nodes: Vec<NodeDef> = Vec::with_capacity(n);
    for (l, layer) in layers.iter().enumerate() {
        for &i in layer {
            nodes.push(NodeDef {
                id: ids[i].clone(),
                layer: l,
                body: if kinds {
                    node_body(rng)
                } else {
                    Body::Function
                },
                succ: Vec::new(),
                to_end: l + 1 == layers.len(),
                cond: None,
                next: Next::Edges,
                aegis: None,
            });
        }
    }

    let mut dynamic = BTreeSet::new();
    for l in 0..layers.len().saturating_sub(1) {
        let next = &layers[l + 1];
        for &i in &layers[l] {
            let k = rng.random_range(1..=next.len().min(3));
            let mut succ: BTreeSet<usize> = BTreeSet::new();
            while succ.len() < k {
                succ.insert(pick(rng, next));
            }
            if let Some(skip) = layers.get(l + 2)
                && rng.random_bool(0.15)
            {
                succ.insert(pick(rng, skip));
            }
            nodes[i].succ = succ.into_iter().collect();
            if let Body::Gate { .. } = nodes[i].body {
                nodes[i].body = Body::Gate {
                    approve: pick(rng, next),
                    reject: pick(rng, next),
                };
            }
            if rng.random_bool(0.2) {
                let k = rng.random_range(1..=next.len().min(3));
                let mut targets: BTreeSet<usize> = BTreeSet::new();
                while targets.len() < k {
                    targets.insert(pick(rng, next));
                }
                nodes[i].cond = Some(targets.into_iter().collect());
            }
            // Only a Function chooses its own routing; a Muster's success
            // musters and a Battalion's follows its edges.
            if matches!(nodes[i].body, Body::Function) {
                nodes[i].next = match rng.random_range(0..20) {
                    0..15 => Next::Edges,
                    15..18 => {
                        let t = pick(rng, next);
                        if !nodes[i].succ.contains(&t) {
                            dynamic.insert(t);
                        }
                        Next::Goto(t)
                    }
                    _ => Next::End,
                };
            }
        }
        // Every node has a static predecessor, so all are reachable.
        for &j in next {
            if !layers[l].iter().any(|&i| nodes[i].succ.contains(&j)) {
                let i = pick(rng, &layers[l]);
                nodes[i].succ.push(j);
                nodes[i].succ.sort_unstable();
            }
        }
    }
    if let Some(last) = layers.last() {
        for &i in last {
            if matches!(nodes[i].body, Body::Function) && rng.random_bool(0.15) {
                nodes[i].next = Next::End;
            }
            // A gate needs a later layer to route to.
            if let Body::Gate { .. } = nodes[i].body {
                nodes[i].body = Body::Function;
            }
        }
    }

    // Each Muster gets its own worker template, `t{i:02}` after every
    // layered node: ids and indices keep the same order, which is the
    // engine's vanguard order (node id, then task index).
    for i in 0..n {
        let Body::Muster { tasks, .. } = nodes[i].body else {
            continue;
        };
        let template = nodes.len();
        let l = nodes[i].layer;
        let mut succ = BTreeSet::new();
        if let Some(next) = layers.get(l + 1) {
            for _ in 0..rng.random_range(1..=next.len().min(2)) {
                succ.insert(pick(rng, next));
            }
        }
        let id = format!("t{i:02}");
        ids.push(id.clone());
        nodes.push(NodeDef {
            id,
            layer: l,
            body: Body::Template,
            succ: succ.into_iter().collect(),
            to_end: l + 1 == layers.len(),
            cond: None,
            next: Next::Edges,
            aegis: None,
        });
        nodes[i].body = Body::Muster { template, tasks };
    }

    for i in 0..nodes.len() {
        let own = rng.random_bool(0.7);
        let route: Vec<usize> = match nodes[i].body {
            // A task may only contribute a delta: no Route on a template.
            Body::Template => Vec::new(),
            _ => layers.get(nodes[i].layer + 1).cloned().unwrap_or_default(),
        };
        if let Body::Gate { .. } = nodes[i].body {
            // Any Aegis on a Gate is refused; its own empty one keeps the
            // graph's default off it.
            nodes[i].aegis = Some(Aegis::default());
        } else if let Body::Battalion(_) = nodes[i].body {
            // Retry and cache are refused on a Battalion, and a timeout would
            // make the outcome depend on time: only a handler, always its
            // own so the default's retry or cache never applies.
            let a = random_aegis(rng, Some(&ids[i]), &route, &ids, endless);
            nodes[i].aegis = Some(Aegis::new().with_on_error(a.on_error));
            nodes[i].body = Body::Battalion(Box::new(child(rng, &ids[i])));
        } else if own {
            nodes[i].aegis = Some(random_aegis(rng, Some(&ids[i]), &route, &ids, endless));
        }
    }
    let default_aegis = rng
        .random_bool(0.5)
        .then(|| random_aegis(rng, None, &[], &ids, endless));
    GraphDef {
        shape,
        nodes,
        entry: layers[0].clone(),
        dynamic,
        default_aegis,
        limits,
    }
}
