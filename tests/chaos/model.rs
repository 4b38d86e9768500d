//! The reference model: what a run of a generated graph must end with,
//! computed from the fault scripts and the policies alone, without an
//! engine, a clock or faults in the cache.
//!
//! Its rules, one per engine promise: a superstep's activations (nodes and
//! mustered tasks, in vanguard order: node id, then task index) each run
//! their attempts to a final success or failure; a final failure goes to
//! the node's handler, if any; an unhandled failure fails the run before
//! anything of its superstep merges; a task's handler that routes (here, a
//! Custom handler that ends) fails the run next; otherwise every
//! contribution merges in vanguard order and the next vanguard is every
//! contributor's successors. A Battalion's one attempt is its child run,
//! modelled the same way. A Gate's first run asks: the superstep's other
//! contributions merge, the run waits, and the answered gate runs again in
//! the next superstep (the same visit), routing by the answer.

use aegis::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::faults::{End, Plan, Scope, Site};
use super::generate::{BUDGET, Body, CUSTOM_HANDLER, GraphDef, LOG, Next, cond_choice};
use aegis::error::NodeErrorSource;
use aegis::error::TimeoutKind;
use aegis::error::Transience;
use aegis::policy::ErrorHandlerSpec;
use aegis::policy::RetryPredicate;

/// How a failed attempt failed, as far as the model can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Function,
    Panic,
    Timeout(TimeoutKind),
    /// A Battalion's child run failed.
    Battalion,
}

impl Kind {
    /// The kind of an engine-side error.
    pub(crate) fn of(source: &NodeErrorSource) -> Option<Kind> {
        match source {
            NodeErrorSource::Panic { .. } => Some(Kind::Panic),
            NodeErrorSource::Function { .. } => Some(Kind::Function),
            NodeErrorSource::Timeout(k) => Some(Kind::Timeout(*k)),
            NodeErrorSource::Battalion { .. } => Some(Kind::Battalion),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) attempt: u32,
    pub(crate) transience: Transience,
    pub(crate) kind: Kind,
}

impl Failure {
    pub(crate) fn matches(&self, e: &NodeError) -> bool {
        e.attempt == self.attempt
            && e.transience == self.transience
            && Kind::of(&e.source) == Some(self.kind)
    }
}

/// What a node's own attempts came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ActResult {
    Succeeded {
        attempt: u32,
    },
    /// Finally failed at `error.attempt`; `handled` names the handler shape.
    /// `budget`: the run budget ended it (no handler runs: there is no time
    /// left). Since budget-aware retry an endless backoff is never begun
    /// (the node fails at once, handler and all), so the model no longer
    /// predicts this; the engine still reports it for a budget cut.
    Failed {
        error: Failure,
        handled: Option<&'static str>,
        budget: bool,
    },
}

/// One activation of one superstep.
#[derive(Debug, Clone)]
pub(crate) struct Act {
    pub(crate) node: usize,
    /// The task index, for a mustered task.
    pub(crate) task: Option<u32>,
    /// The node's activation count in the thread, this one included.
    pub(crate) visit: u32,
    /// Every failed attempt, in order (the final one included when failed).
    pub(crate) failed: Vec<Failure>,
    pub(crate) result: ActResult,
    /// Whether a successful result may be stored in (and served from) the
    /// cache: the node's own Edges-routed success under a cache policy.
    pub(crate) cacheable: bool,
    /// A Battalion's child run.
    pub(crate) child: Option<Box<Expected>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) superstep: u32,
    pub(crate) acts: Vec<Act>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    /// `budget`: the run budget ended it (`RunTimeoutExceeded`), the
    /// first unhandled failure still on its waypoint.
    Failed {
        node: usize,
        error: Failure,
        budget: bool,
    },
    /// A zero run budget: `RunTimeoutExceeded` before any node ran.
    NoBudget,
    /// The handler of task `task` of template `node` did not contribute a
    /// plain delta (`MusterHandlerMustBeDeltaOnly`).
    Violation {
        node: usize,
        task: u32,
    },
}

/// Everything the model predicts for one thread.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub(crate) steps: Vec<Step>,
    pub(crate) outcome: Outcome,
    pub(crate) log: Vec<String>,
    pub(crate) merged: i64,
    /// Route handlers' errors: (node id, attempt).
    pub(crate) errors: Vec<(String, u32)>,
    /// Custom handler calls: (node id, attempt), in superstep order, child
    /// runs' included.
    pub(crate) custom: Vec<(String, u32)>,
    /// Every wait for input: the superstep that asked and the gates asking.
    pub(crate) pauses: Vec<(u32, Vec<usize>)>,
}

/// A mustered task's key.
pub(crate) fn task_key(task: u32) -> String {
    format!("k{task}")
}

/// The token an activation's success at (superstep, attempt) logs.
pub(crate) fn success_token(id: &str, task: Option<u32>, superstep: u32, attempt: u32) -> String {
    match task {
        Some(t) => format!("{id}[{}]@s{superstep}a{attempt}", task_key(t)),
        None => format!("{id}@s{superstep}a{attempt}"),
    }
}

/// The token the custom handler logs for a node's final failure.
pub(crate) fn custom_token(id: &str, attempt: u32) -> String {
    format!("{id}:custom@a{attempt}")
}

/// Whether the custom handler ends the branch (else it follows the edges).
pub(crate) fn custom_ends(id: &str) -> bool {
    id.bytes().last().is_some_and(|b| b % 2 == 1)
}

/// The custom predicate: anything but a permanent failure, up to attempt 3.
pub(crate) fn custom_allows(transience: Transience, next_attempt: u32) -> bool {
    transience != Transience::Permanent && next_attempt <= 3
}

/// How one scripted attempt ends under `timeout`: `None` for success.
pub(crate) fn attempt_result(plan: &Plan, timeout: Option<&TimeoutPolicy>) -> Option<Failure> {
    let never = Duration::MAX;
    let run = timeout.and_then(|t| t.run_timeout).unwrap_or(never);
    let idle = match timeout.and_then(|t| t.idle_timeout) {
        // Beats every `step` keep an idle window longer than `step` open.
        Some(i) if !plan.beats || plan.step > i || plan.end == End::Hang => i,
        _ => never,
    };
    // The engine checks the wall clock before the idle window: a tie is Run.
    let (fire, kind) = if run <= idle {
        (run, TimeoutKind::Run)
    } else {
        (idle, TimeoutKind::Idle)
    };
    let work = plan.work().unwrap_or(never);
    if fire < work {
        return Some(Failure {
            attempt: 0,
            transience: Transience::Transient,
            kind: Kind::Timeout(kind),
        });
    }
    let (transience, kind) = match plan.end {
        End::Ok => return None,
        End::Transient => (Transience::Transient, Kind::Function),
        End::Permanent => (Transience::Permanent, Kind::Function),
        End::Unknown => (Transience::Unknown, Kind::Function),
        End::Panic => (Transience::Unknown, Kind::Panic),
        End::Hang => unreachable!("a hang is only scripted under a timeout"),
    };
    Some(Failure {
        attempt: 0,
        transience,
        kind,
    })
}

fn retry_allows(policy: &RetryPolicy, transience: Transience, next: u32) -> bool {
    match &policy.retry_on {
        RetryPredicate::Custom(_) => custom_allows(transience, next),
        builtin => builtin.allows_builtin(transience).unwrap_or(false),
    }
}

/// Where an activation's contribution sends the run next.
#[derive(Debug, Clone)]
enum Route {
    Edges,
    Goto(usize),
    End,
    Muster(usize, u32),
    /// Asks for input: nothing merges from it; it runs again once answered.
    Parley,
}

/// What one activation merges and where it leads.
struct Contribution {
    node: usize,
    log: Vec<String>,
    merged: i64,
    errors: Vec<(String, u32)>,
    route: Route,
}

pub(crate) struct Model<'a> {
    pub(crate) def: &'a GraphDef,
    pub(crate) scope: Scope,
    /// The script of every attempt.
    pub(crate) plan: &'a dyn Fn(Site) -> Plan,
    /// The answer to the `k`-th wait for input of a thread (approve?).
    pub(crate) answer: &'a dyn Fn(u32) -> bool,
}

impl Model<'_> {
    /// One activation's scripted attempts, without its handler.
    fn attempts(
        &self,
        node: usize,
        task: Option<u32>,
        superstep: u32,
    ) -> (Vec<Failure>, ActResult) {
        let aegis = self.def.aegis(node);
        let retry = aegis.and_then(|a| a.retry.as_ref());
        let timeout = aegis.and_then(|a| a.timeout.as_ref());
        let max = retry.map_or(1, |r| r.max_attempts.max(1));
        let mut failed = Vec::new();
        let mut attempt = 1;
        loop {
            let plan = (self.plan)(Site {
                scope: self.scope,
                node,
                task,
                superstep,
                attempt,
            });
            let Some(mut f) = attempt_result(&plan, timeout) else {
                return (failed, ActResult::Succeeded { attempt });
            };
            f.attempt = attempt;
            failed.push(f);
            let again =
                attempt < max && retry.is_some_and(|r| retry_allows(r, f.transience, attempt + 1));
            if !again {
                return (failed, self.failed(node, f));
            }
            // The only wait that reaches a budget is an endless one: it is
            // never begun (budget-aware retry), so the node fails at once
            // and its handler runs in the budget left.
            if retry.is_some_and(|r| r.base_delay(attempt + 1) == Duration::MAX) {
                assert_eq!(self.def.limits.run_timeout, Some(BUDGET), "an endless wait");
                return (failed, self.failed(node, f));
            }
            attempt += 1;
        }
    }

    fn failed(&self, node: usize, error: Failure) -> ActResult {
        let handled = self
            .def
            .aegis(node)
            .and_then(|a| a.on_error.as_ref())
            .map(|h| h.kind());
        ActResult::Failed {
            error,
            handled,
            budget: false,
        }
    }

    /// One activation: its attempts, and what it contributes if it does.
    fn activation(
        &self,
        node: usize,
        task: Option<u32>,
        visit: u32,
        superstep: u32,
        answered: Option<bool>,
    ) -> (Act, Option<Contribution>) {
        let def = self.def;
        let n = &def.nodes[node];
        let id = n.id.as_str();
        let mut act = Act {
            node,
            task,
            visit,
            failed: Vec::new(),
            result: ActResult::Succeeded { attempt: 1 },
            cacheable: false,
            child: None,
        };
        let own = |log: Vec<String>, merged, errors, route| Contribution {
            node,
            log,
            merged,
            errors,
            route,
        };
        if let Body::Gate { approve, reject } = n.body {
            let route = match answered {
                None => Route::Parley,
                Some(true) => Route::Goto(approve),
                Some(false) => Route::Goto(reject),
            };
            return (act, Some(own(Vec::new(), 0, Vec::new(), route)));
        }
        if let Body::Battalion(child) = &n.body {
            // No retry on a Battalion: its one attempt is the child run.
            let exp = Model {
                def: child,
                scope: Scope::Child {
                    parent: node,
                    visit,
                },
                plan: self.plan,
                answer: self.answer,
            }
            .run();
            let contribution = match exp.outcome {
                Outcome::Completed => Some(own(
                    exp.log.clone(),
                    exp.merged,
                    exp.errors.clone(),
                    Route::Edges,
                )),
                Outcome::Failed { .. } | Outcome::NoBudget => {
                    // A child ended by its budget carries no node error:
                    // its transience is unknown.
                    let transience = match exp.outcome {
                        Outcome::Failed {
                            error,
                            budget: false,
                            ..
                        } => error.transience,
                        _ => Transience::Unknown,
                    };
                    let f = Failure {
                        attempt: 1,
                        transience,
                        kind: Kind::Battalion,
                    };
                    act.failed.push(f);
                    act.result = self.failed(node, f);
                    None
                }
                Outcome::Violation { .. } => unreachable!("children have no musters"),
            };
            act.child = Some(Box::new(exp));
            return (act, contribution);
        }
        let (failed, result) = self.attempts(node, task, superstep);
        act.failed = failed;
        act.result = result;
        let ActResult::Succeeded { attempt } = act.result else {
            return (act, None);
        };
        let token = success_token(id, task, superstep, attempt);
        let route = match (&n.body, &n.next) {
            (Body::Muster { template, tasks }, _) => Route::Muster(*template, *tasks),
            (_, Next::Edges) => Route::Edges,
            (_, Next::Goto(t)) => Route::Goto(*t),
            (_, Next::End) => Route::End,
        };
        act.cacheable =
            matches!(route, Route::Edges) && def.aegis(node).is_some_and(|a| a.cache.is_some());
        (act, Some(own(vec![token], 1, Vec::new(), route)))
    }

    /// What a final failure's handler contributes, if it has one. A Custom
    /// call is logged in `custom`.
    fn handler(
        &self,
        act: &Act,
        error: Failure,
        custom: &mut Vec<(String, u32)>,
    ) -> Option<Contribution> {
        let def = self.def;
        let id = def.nodes[act.node].id.as_str();
        let c = |log: Vec<String>, errors, route| Contribution {
            node: act.node,
            merged: log.len() as i64,
            log,
            errors,
            route,
        };
        Some(match def.aegis(act.node)?.on_error.as_ref()? {
            ErrorHandlerSpec::Route { to, .. } => {
                let to = def.index(to.as_str()).expect("declared target");
                c(
                    Vec::new(),
                    vec![(id.to_string(), error.attempt)],
                    Route::Goto(to),
                )
            }
            ErrorHandlerSpec::Absorb { fallback_delta } => {
                let token = fallback_delta
                    .get(LOG)
                    .and_then(|v| v.as_str())
                    .expect("absorb token")
                    .to_string();
                c(vec![token], Vec::new(), Route::Edges)
            }
            ErrorHandlerSpec::Custom(name) => {
                assert_eq!(name, CUSTOM_HANDLER);
                custom.push((id.to_string(), error.attempt));
                let route = if custom_ends(id) {
                    Route::End
                } else {
                    Route::Edges
                };
                c(vec![custom_token(id, error.attempt)], Vec::new(), route)
            }
            other => unreachable!("the generator makes no {other:?} handler"),
        })
    }

    /// The whole run.
    pub(crate) fn run(&self) -> Expected {
        let def = self.def;
        let mut log: Vec<String> = Vec::new();
        let mut merged = 0i64;
        let mut errors = Vec::new();
        let mut custom = Vec::new();
        let mut steps = Vec::new();
        let mut pauses: Vec<(u32, Vec<usize>)> = Vec::new();
        // The gates the next superstep answers, and the answer.
        let mut asked: (Vec<usize>, bool) = (Vec::new(), false);
        let mut visits: BTreeMap<usize, u32> = BTreeMap::new();
        let mut vanguard: BTreeSet<(usize, Option<u32>)> =
            def.entry.iter().map(|&i| (i, None)).collect();
        let mut superstep = 0;
        let zero_budget = def.limits.run_timeout == Some(Duration::ZERO);
        let outcome = loop {
            if vanguard.is_empty() {
                break Outcome::Completed;
            }
            if zero_budget {
                break Outcome::NoBudget;
            }
            superstep += 1;
            let nodes: BTreeSet<usize> = vanguard.iter().map(|a| a.0).collect();
            for n in nodes {
                *visits.entry(n).or_default() += 1;
            }
            let mut acts = Vec::new();
            let mut failure = None;
            let mut budget_gone = false;
            let mut violation = None;
            let mut contributions: Vec<Contribution> = Vec::new();
            for &(i, task) in &vanguard {
                let answered = asked.0.contains(&i).then_some(asked.1);
                let (act, contribution) = self.activation(i, task, visits[&i], superstep, answered);
                if let Some(child) = &act.child {
                    custom.extend(child.custom.iter().cloned());
                }
                let contribution = match (&act.result, contribution) {
                    (ActResult::Succeeded { .. }, c) => c,
                    (ActResult::Failed { error, budget, .. }, _) => {
                        budget_gone |= *budget;
                        let handled = if *budget {
                            None
                        } else {
                            self.handler(&act, *error, &mut custom)
                        };
                        if handled.is_none() && failure.is_none() {
                            failure = Some((i, *error));
                        }
                        handled
                    }
                };
                if let Some(c) = contribution {
                    // A task contributes a delta only; its own success is
                    // always Edges, so only its handler can break the rule.
                    if let Some(t) = task
                        && !matches!(c.route, Route::Edges)
                        && violation.is_none()
                    {
                        violation = Some((i, t));
                    }
                    contributions.push(c);
                }
                acts.push(act);
            }
            steps.push(Step { superstep, acts });
            if let Some((node, error)) = failure {
                break Outcome::Failed {
                    node,
                    error,
                    budget: budget_gone,
                };
            }
            if let Some((node, task)) = violation {
                break Outcome::Violation { node, task };
            }
            for c in &contributions {
                log.extend(c.log.iter().cloned());
                merged += c.merged;
                errors.extend(c.errors.iter().cloned());
            }
            let mut next = BTreeSet::new();
            for c in &contributions {
                match c.route {
                    Route::Edges => {
                        let n = &def.nodes[c.node];
                        next.extend(n.succ.iter().map(|&s| (s, None)));
                        if let Some(targets) = &n.cond {
                            next.extend(cond_choice(targets, log.len()).map(|t| (t, None)));
                        }
                    }
                    Route::Goto(t) => {
                        next.insert((t, None));
                    }
                    Route::Muster(template, tasks) => {
                        next.extend((0..tasks).map(|j| (template, Some(j))));
                    }
                    Route::End | Route::Parley => {}
                }
            }
            // The asking gates run again, answered, in the next superstep,
            // as the same visit.
            let parleys: Vec<usize> = contributions
                .iter()
                .filter(|c| matches!(c.route, Route::Parley))
                .map(|c| c.node)
                .collect();
            asked = (Vec::new(), false);
            if !parleys.is_empty() {
                for &n in &parleys {
                    *visits.entry(n).or_default() -= 1;
                    next.insert((n, None));
                }
                asked = (parleys.clone(), (self.answer)(pauses.len() as u32));
                pauses.push((superstep, parleys));
            }
            vanguard = next;
        };
        Expected {
            steps,
            outcome,
            log,
            merged,
            errors,
            custom,
            pauses,
        }
    }
}
