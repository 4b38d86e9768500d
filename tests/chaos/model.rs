//! The reference model: what a run of a generated graph must end with,
//! computed from the fault scripts and the policies alone, without an
//! engine, a clock or faults in the cache.

use aegis::*;
use std::collections::BTreeSet;
use std::time::Duration;

use super::faults::{End, Plan};
use super::generate::{CUSTOM_HANDLER, GraphDef, LOG, Next, cond_choice};

/// How a failed attempt failed, as far as the model can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Function,
    Panic,
    Timeout(TimeoutKind),
}

impl Kind {
    /// The kind of an engine-side error.
    pub(crate) fn of(source: &NodeErrorSource) -> Option<Kind> {
        match source {
            NodeErrorSource::Function { message } if message.starts_with("node panicked") => {
                Some(Kind::Panic)
            }
            NodeErrorSource::Function { .. } => Some(Kind::Function),
            NodeErrorSource::Timeout(k) => Some(Kind::Timeout(*k)),
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
    Failed {
        error: Failure,
        handled: Option<&'static str>,
    },
}

/// One activation of one superstep.
#[derive(Debug, Clone)]
pub(crate) struct Act {
    pub(crate) node: usize,
    /// Every failed attempt, in order (the final one included when failed).
    pub(crate) failed: Vec<Failure>,
    pub(crate) result: ActResult,
    /// Whether a successful result may be stored in (and served from) the
    /// cache: the node's own Edges-routed success under a cache policy.
    pub(crate) cacheable: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) superstep: u32,
    pub(crate) acts: Vec<Act>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Failed { node: usize, error: Failure },
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
    /// Custom handler calls: (node id, attempt), in superstep order.
    pub(crate) custom: Vec<(String, u32)>,
}

/// The token a node's success at (superstep, attempt) logs.
pub(crate) fn success_token(id: &str, superstep: u32, attempt: u32) -> String {
    format!("{id}@s{superstep}a{attempt}")
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

pub(crate) struct Model<'a, P> {
    pub(crate) def: &'a GraphDef,
    /// The script of (node, superstep, attempt).
    pub(crate) plan: P,
}

impl<P: Fn(usize, u32, u32) -> Plan> Model<'_, P> {
    /// One activation's attempts, without its handler.
    pub(crate) fn attempts(&self, node: usize, superstep: u32) -> (Vec<Failure>, ActResult) {
        let aegis = self.def.aegis(node);
        let retry = aegis.and_then(|a| a.retry.as_ref());
        let timeout = aegis.and_then(|a| a.timeout.as_ref());
        let max = retry.map_or(1, |r| r.max_attempts.max(1));
        let mut failed = Vec::new();
        let mut attempt = 1;
        loop {
            let plan = (self.plan)(node, superstep, attempt);
            let Some(mut f) = attempt_result(&plan, timeout) else {
                return (failed, ActResult::Succeeded { attempt });
            };
            f.attempt = attempt;
            failed.push(f);
            let again =
                attempt < max && retry.is_some_and(|r| retry_allows(r, f.transience, attempt + 1));
            if !again {
                let handled = aegis.and_then(|a| a.on_error.as_ref()).map(|h| h.kind());
                return (failed, ActResult::Failed { error: f, handled });
            }
            attempt += 1;
        }
    }

    /// The whole run.
    pub(crate) fn run(&self) -> Expected {
        let def = self.def;
        let mut log: Vec<String> = Vec::new();
        let mut merged = 0i64;
        let mut errors = Vec::new();
        let mut custom = Vec::new();
        let mut steps = Vec::new();
        let mut vanguard: BTreeSet<usize> = def.entry.iter().copied().collect();
        let mut superstep = 0;
        let outcome = loop {
            if vanguard.is_empty() {
                break Outcome::Completed;
            }
            superstep += 1;
            let mut acts = Vec::new();
            let mut failure = None;
            // (node, log tokens, error, where next)
            let mut contributions: Vec<(usize, Option<String>, Option<u32>, Next)> = Vec::new();
            for &i in &vanguard {
                let id = def.nodes[i].id.as_str();
                let (failed, result) = self.attempts(i, superstep);
                let cacheable = matches!(result, ActResult::Succeeded { .. })
                    && def.nodes[i].next == Next::Edges
                    && def.aegis(i).is_some_and(|a| a.cache.is_some());
                match &result {
                    ActResult::Succeeded { attempt } => contributions.push((
                        i,
                        Some(success_token(id, superstep, *attempt)),
                        None,
                        def.nodes[i].next.clone(),
                    )),
                    ActResult::Failed { error, .. } => {
                        match def.aegis(i).and_then(|a| a.on_error.as_ref()) {
                            None => {
                                if failure.is_none() {
                                    failure = Some((i, *error));
                                }
                            }
                            Some(ErrorHandlerSpec::Route { to, .. }) => {
                                let to = def.index(to.as_str()).expect("declared target");
                                contributions.push((i, None, Some(error.attempt), Next::Goto(to)));
                            }
                            Some(ErrorHandlerSpec::Absorb { fallback_delta }) => {
                                let token = fallback_delta
                                    .get(LOG)
                                    .and_then(|v| v.as_str())
                                    .expect("absorb token")
                                    .to_string();
                                contributions.push((i, Some(token), None, Next::Edges));
                            }
                            Some(ErrorHandlerSpec::Custom(name)) => {
                                assert_eq!(name, CUSTOM_HANDLER);
                                custom.push((id.to_string(), error.attempt));
                                let next = if custom_ends(id) {
                                    Next::End
                                } else {
                                    Next::Edges
                                };
                                contributions.push((
                                    i,
                                    Some(custom_token(id, error.attempt)),
                                    None,
                                    next,
                                ));
                            }
                        }
                    }
                }
                acts.push(Act {
                    node: i,
                    failed,
                    result,
                    cacheable,
                });
            }
            steps.push(Step { superstep, acts });
            if let Some((node, error)) = failure {
                break Outcome::Failed { node, error };
            }
            for (i, token, error, _) in &contributions {
                if let Some(t) = token {
                    log.push(t.clone());
                    merged += 1;
                }
                if let Some(a) = error {
                    errors.push((def.nodes[*i].id.clone(), *a));
                }
            }
            let mut next = BTreeSet::new();
            for (i, _, _, route) in &contributions {
                match route {
                    Next::Edges => {
                        next.extend(def.nodes[*i].succ.iter().copied());
                        if let Some(targets) = &def.nodes[*i].cond {
                            next.extend(cond_choice(targets, log.len()));
                        }
                    }
                    Next::Goto(t) => {
                        next.insert(*t);
                    }
                    Next::End => {}
                }
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
        }
    }
}
