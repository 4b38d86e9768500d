//! Side effects from node code: `ctx.effect("charge").run(|key| ..)`.
//!
//! Each effect gets an idempotency key from its thread, node, task key,
//! name and an optional part of the caller's ([`EffectKey`]): the same on
//! every attempt, resume and takeover of that node, different on a
//! Chronicle fork (another thread). The effect is recorded in the store's
//! [`EffectLedger`] as started before its call and as done with its result
//! after it, so a re-execution returns the recorded result without calling
//! out. A started effect without a result is an unknown outcome, which the
//! effect's [`OnUnknown`] policy handles; it is never called again blindly.

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::effect_ledger::{EffectEntry, EffectLedger, EffectStart, EffectState};
use super::{NodeContext, ParleyRequest, ParleyResponse};
use crate::canon::Canon;
use crate::error::{StateNodeError, StoreError, Transience, redact_json, redact_secrets};

/// The most bytes an effect's recorded result may take as JSON, unless
/// [`Effect::with_max_result_bytes`] says otherwise.
pub const DEFAULT_MAX_EFFECT_RESULT_BYTES: usize = 64 * 1024;

/// An effect's idempotency key: `aegis-` and 32 hex digits, safe to send
/// as an HTTP header (`Idempotency-Key`).
///
/// A digest of the thread, the node, the task key (a mustered task's), the
/// effect's name and the caller's part: stable across attempts, resumes and
/// takeovers, different on another thread (a Chronicle fork).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey(String);

impl EffectKey {
    /// The key of effect `name` (with the caller's `part`, if any) of
    /// `node_id`'s task `task_key` (none outside a muster) on `thread_id`.
    pub fn derive(
        thread_id: &str,
        node_id: &str,
        task_key: Option<&str>,
        name: &str,
        part: Option<&str>,
    ) -> Self {
        let mut c = Canon::new("aegis/effect-key/1");
        c.str(thread_id).str(node_id);
        for item in [task_key, Some(name), part] {
            match item {
                Some(s) => c.str(s),
                None => c.absent(),
            };
        }
        let hex = c.hex();
        EffectKey(format!("aegis-{}", &hex[..32]))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an effect does with an unknown outcome: a later execution finds
/// it started and without a result (the call may or may not have happened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnUnknown {
    /// The attempt fails as Permanent ([`EffectError::UnknownOutcome`]).
    #[default]
    Fail,
    /// Calls again with the same key: for outside systems that honour
    /// idempotency keys, which answer a repeated key with the first result.
    RetrySameKey,
    /// Asks the outside system what happened ([`Effect::reconcile`]).
    Reconcile,
    /// Suspends the run with a parley carrying the key and its context; the
    /// answer ([`EffectAnswer`]) says what happened.
    AskHuman,
}

impl OnUnknown {
    /// The policy's name, as traces and the stream show it.
    pub fn name(self) -> &'static str {
        match self {
            OnUnknown::Fail => "fail",
            OnUnknown::RetrySameKey => "retry_same_key",
            OnUnknown::Reconcile => "reconcile",
            OnUnknown::AskHuman => "ask_human",
        }
    }
}

/// An effect failed, or cannot go on without a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EffectError {
    /// The engine's waypoint store keeps no effect ledger (a store of your
    /// own that does not implement
    /// [`WaypointStore::effect_ledger`](crate::waypoint::WaypointStore::effect_ledger)).
    #[error("effect `{effect}`: the waypoint store keeps no effect ledger")]
    NoLedger {
        /// The effect's name.
        effect: String,
    },
    /// The ledger could not be read or written.
    #[error("effect `{effect}` ({key}): {source}")]
    Store {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
        /// The store's error.
        source: StoreError,
    },
    /// The call failed: whether it took effect is unknown, so the effect
    /// stays started and the next attempt applies its [`OnUnknown`] policy.
    #[error("effect `{effect}` ({key}): the call failed: {message}")]
    Call {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
        /// The call's error (secrets redacted).
        message: String,
    },
    /// An unknown outcome under [`OnUnknown::Fail`], or one a human
    /// declared failed.
    #[error(
        "effect `{effect}` ({key}): unknown outcome (started {starts} time(s), no result recorded); its policy is to fail"
    )]
    UnknownOutcome {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
        /// How many times it was started.
        starts: u32,
    },
    /// An unknown outcome under [`OnUnknown::AskHuman`]: the engine turns
    /// this into a parley; the node re-runs with the answer.
    #[error("effect `{effect}` ({key}): unknown outcome; a human is asked")]
    NeedsHuman {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
    },
    /// The reconcile function failed; the next attempt asks again.
    #[error("effect `{effect}` ({key}): reconcile failed: {message}")]
    Reconcile {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
        /// The function's error (secrets redacted).
        message: String,
    },
    /// The result (or a reconciled or human-given one) cannot be recorded:
    /// too large, or not the call's type. The effect stays started.
    #[error("effect `{effect}` ({key}): {message}")]
    Unrecordable {
        /// The effect's name.
        effect: String,
        /// Its key.
        key: String,
        /// What is wrong with the result.
        message: String,
    },
    /// The effect is set up wrong ([`OnUnknown::Reconcile`] without
    /// [`Effect::reconcile`]); nothing was called.
    #[error("effect `{effect}`: {message}")]
    Misconfigured {
        /// The effect's name.
        effect: String,
        /// What is wrong.
        message: String,
    },
}

impl EffectError {
    /// How a node's retry policy should treat it: a failed call, a failed
    /// reconcile or a store error are retried (the next attempt applies the
    /// policy); the rest are permanent.
    pub fn transience(&self) -> Transience {
        match self {
            EffectError::Call { .. }
            | EffectError::Reconcile { .. }
            | EffectError::Store { .. } => Transience::Transient,
            _ => Transience::Permanent,
        }
    }
}

impl From<EffectError> for StateNodeError {
    fn from(e: EffectError) -> Self {
        StateNodeError::with_transience(e.to_string(), e.transience())
    }
}

/// The answer to an effect's parley ([`OnUnknown::AskHuman`]), as a
/// [`ParleyResponse`] to deliver with `resume` or `Client::answer`.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EffectAnswer;

impl EffectAnswer {
    /// The effect took place, with `result` (the call's result type, as
    /// JSON): it is recorded and returned.
    pub fn done(key: &str, result: Value) -> ParleyResponse {
        ParleyResponse::new(json!({ "effect_key": key, "outcome": "done", "result": result }))
    }

    /// The effect did not take place: it is called again, with the same key.
    pub fn not_done(key: &str) -> ParleyResponse {
        ParleyResponse::new(json!({ "effect_key": key, "outcome": "not_done" }))
    }

    /// Give up: the attempt fails as Permanent.
    pub fn failed(key: &str) -> ParleyResponse {
        ParleyResponse::new(json!({ "effect_key": key, "outcome": "failed" }))
    }
}

/// What became of an effect in one attempt, as its node's record
/// ([`NodeExecutionRecord::effects`](crate::waypoint::NodeExecutionRecord::effects))
/// and the run's stream show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EffectOutcome {
    /// Called for the first time, and its result recorded.
    Done,
    /// Already done: its recorded result was returned, nothing called.
    Replayed,
    /// Found started without a result: an unknown outcome (the note the
    /// policy's resolution follows).
    Unknown,
    /// An unknown outcome called again with the same key, and recorded.
    RetriedSameKey,
    /// An unknown outcome the reconcile function found done: recorded.
    ReconciledDone,
    /// An unknown outcome the reconcile function found not done: called
    /// again, and recorded.
    ReconciledNotDone,
    /// An unknown outcome put to a human (a parley).
    AskedHuman,
    /// A human answered done: the given result recorded.
    AnsweredDone,
    /// A human answered not done: called again, and recorded.
    AnsweredNotDone,
    /// The call failed: the effect stays started (unknown).
    CallFailed,
    /// An unknown outcome failed the attempt (its policy, or a human).
    Failed,
}

impl EffectOutcome {
    /// The outcome's name, as the stream and the timeline show it.
    pub fn name(self) -> &'static str {
        match self {
            EffectOutcome::Done => "done",
            EffectOutcome::Replayed => "replayed",
            EffectOutcome::Unknown => "unknown",
            EffectOutcome::RetriedSameKey => "retried_same_key",
            EffectOutcome::ReconciledDone => "reconciled_done",
            EffectOutcome::ReconciledNotDone => "reconciled_not_done",
            EffectOutcome::AskedHuman => "asked_human",
            EffectOutcome::AnsweredDone => "answered_done",
            EffectOutcome::AnsweredNotDone => "answered_not_done",
            EffectOutcome::CallFailed => "call_failed",
            EffectOutcome::Failed => "failed",
        }
    }
}

/// One effect of one attempt, on its node's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct EffectNote {
    /// The attempt.
    pub attempt: u32,
    /// The effect's name.
    pub name: String,
    /// Its idempotency key.
    pub key: String,
    /// What became of it.
    pub outcome: EffectOutcome,
}

/// What a human answered about one effect.
enum Answered {
    Done(Value),
    NotDone,
    Failed,
}

fn answered(response: Option<&ParleyResponse>, key: &EffectKey) -> Option<Answered> {
    let v = &response?.value;
    if v.get("effect_key").and_then(Value::as_str) != Some(key.as_str()) {
        return None;
    }
    match v.get("outcome").and_then(Value::as_str)? {
        "done" => Some(Answered::Done(
            v.get("result").cloned().unwrap_or(Value::Null),
        )),
        "not_done" => Some(Answered::NotDone),
        "failed" => Some(Answered::Failed),
        _ => None,
    }
}

/// Which attempt asked for a parley: its thread, node, task and attempt.
type AskId = (String, String, Option<String>, u32);

/// Which activation an effect note belongs to: its thread, node and task.
type NoteId = (String, String, Option<String>);

/// The engine's effect ledger as its attempts reach it, and the parleys
/// effects asked for, until the engine turns the failed attempt into one.
pub(crate) struct EffectScope {
    ledger: Arc<dyn EffectLedger>,
    pending: AtomicUsize,
    asks: Mutex<HashMap<AskId, ParleyRequest>>,
    /// Notes not yet on a record, and how many activations have some.
    noted: AtomicUsize,
    notes: Mutex<HashMap<NoteId, Vec<EffectNote>>>,
}

impl fmt::Debug for EffectScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EffectScope").finish_non_exhaustive()
    }
}

impl EffectScope {
    pub(crate) fn new(ledger: Arc<dyn EffectLedger>) -> Self {
        EffectScope {
            ledger,
            pending: AtomicUsize::new(0),
            asks: Mutex::new(HashMap::new()),
            noted: AtomicUsize::new(0),
            notes: Mutex::new(HashMap::new()),
        }
    }

    fn ask(&self, id: AskId, request: ParleyRequest) {
        let mut asks = self.asks.lock().unwrap_or_else(|p| p.into_inner());
        if asks.insert(id, request).is_none() {
            self.pending.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The parley an attempt's effect asked for, taken; free when none is
    /// pending.
    #[inline]
    pub(crate) fn take_ask(&self, ctx: &NodeContext) -> Option<ParleyRequest> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.take_pending_ask(ctx)
    }

    #[inline(never)]
    fn take_pending_ask(&self, ctx: &NodeContext) -> Option<ParleyRequest> {
        let mut asks = self.asks.lock().unwrap_or_else(|p| p.into_inner());
        let taken = asks.remove(&ask_id(ctx));
        if taken.is_some() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
        taken
    }
}

impl EffectScope {
    fn note(&self, id: NoteId, note: EffectNote) {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        let list = notes.entry(id).or_default();
        if list.is_empty() {
            self.noted.fetch_add(1, Ordering::AcqRel);
        }
        list.push(note);
    }

    /// How many activations have notes not yet on a record.
    #[cfg(test)]
    pub(crate) fn noted(&self) -> usize {
        self.noted.load(Ordering::Acquire)
    }

    /// The notes of the activation of `node_id` (task `task_key`) on
    /// `thread_id`, taken for its record; free when none is pending.
    #[inline]
    pub(crate) fn take_notes(
        &self,
        thread_id: &str,
        node_id: &str,
        task_key: Option<&str>,
    ) -> Vec<EffectNote> {
        if self.noted.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.take_noted(thread_id, node_id, task_key)
    }

    #[inline(never)]
    fn take_noted(
        &self,
        thread_id: &str,
        node_id: &str,
        task_key: Option<&str>,
    ) -> Vec<EffectNote> {
        let id = (
            thread_id.to_string(),
            node_id.to_string(),
            task_key.map(str::to_string),
        );
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        let taken = notes.remove(&id).unwrap_or_default();
        if !taken.is_empty() {
            self.noted.fetch_sub(1, Ordering::AcqRel);
        }
        taken
    }
}

fn ask_id(ctx: &NodeContext) -> AskId {
    (
        ctx.thread_id().to_string(),
        ctx.node_id().to_string(),
        ctx.task().map(|t| t.task_key.clone()),
        ctx.attempt(),
    )
}

type Reconciler<'a> =
    Box<dyn FnOnce(EffectKey) -> BoxFuture<'a, Result<Option<Value>, String>> + Send + 'a>;

/// One side effect of a node, built by [`NodeContext::effect`] and run by
/// [`Effect::run`].
#[must_use = "an effect does nothing until it is run"]
pub struct Effect<'a> {
    ctx: &'a NodeContext,
    name: String,
    part: Option<String>,
    on_unknown: OnUnknown,
    /// In a mutex only so that an effect is `Sync` (a node's future holds
    /// it across awaits): it is taken once.
    reconciler: Mutex<Option<Reconciler<'a>>>,
    max_result_bytes: usize,
}

impl fmt::Debug for Effect<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Effect")
            .field("name", &self.name)
            .field("on_unknown", &self.on_unknown)
            .finish_non_exhaustive()
    }
}

impl NodeContext {
    /// The side effect `name` of this node (unique within the node, or
    /// told apart with [`Effect::with_key_part`]): see [`Effect::run`].
    pub fn effect(&self, name: impl Into<String>) -> Effect<'_> {
        Effect {
            ctx: self,
            name: name.into(),
            part: None,
            on_unknown: OnUnknown::Fail,
            reconciler: Mutex::new(None),
            max_result_bytes: DEFAULT_MAX_EFFECT_RESULT_BYTES,
        }
    }
}

impl<'a> Effect<'a> {
    /// Adds `part` to the key: one node making the same effect for several
    /// items (an order id), or once per visit of a node in a loop.
    pub fn with_key_part(mut self, part: impl Into<String>) -> Self {
        self.part = Some(part.into());
        self
    }

    /// Sets what an unknown outcome does ([`OnUnknown::Fail`] by default).
    /// [`OnUnknown::Reconcile`] needs [`Effect::reconcile`], which sets it.
    pub fn on_unknown(mut self, policy: OnUnknown) -> Self {
        self.on_unknown = policy;
        self
    }

    /// Reconciles unknown outcomes with `check`, which asks the outside
    /// system about the key: `Some(result)` if the effect took place (the
    /// result is recorded and returned), `None` if it did not (it is called
    /// again with the same key). Sets [`OnUnknown::Reconcile`].
    pub fn reconcile<T, E, F, Fut>(mut self, check: F) -> Self
    where
        T: Serialize,
        E: fmt::Display,
        F: FnOnce(EffectKey) -> Fut + Send + 'a,
        Fut: Future<Output = Result<Option<T>, E>> + Send + 'a,
    {
        self.on_unknown = OnUnknown::Reconcile;
        self.reconciler = Mutex::new(Some(Box::new(move |key| {
            Box::pin(async move {
                match check(key).await {
                    Ok(Some(t)) => serde_json::to_value(t).map(Some).map_err(|e| e.to_string()),
                    Ok(None) => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            })
        })));
        self
    }

    /// Bounds the recorded result's JSON to `bytes`
    /// ([`DEFAULT_MAX_EFFECT_RESULT_BYTES`] by default).
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// The effect's key.
    pub fn key(&self) -> EffectKey {
        EffectKey::derive(
            self.ctx.thread_id(),
            self.ctx.node_id().as_str(),
            self.ctx.task().map(|t| t.task_key.as_str()),
            &self.name,
            self.part.as_deref(),
        )
    }

    /// Runs the effect: `call` gets the key to send on (an
    /// `Idempotency-Key` header) and is called only if the ledger has no
    /// entry for it (one write before, one after), or if the effect's
    /// policy decided so after an unknown outcome. A done effect returns
    /// its recorded result. The result goes through JSON (secrets
    /// redacted) on every path, so the first run and a replay return the
    /// same value.
    pub async fn run<T, E, F, Fut>(mut self, call: F) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display,
        F: FnOnce(EffectKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = self.key();
        let Some(scope) = self.ctx.shared.effects.clone() else {
            return Err(EffectError::NoLedger { effect: self.name });
        };
        // A reconcile policy without its function is refused before the
        // first call, not found out at the first crash.
        if self.on_unknown == OnUnknown::Reconcile
            && self
                .reconciler
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
        {
            return Err(EffectError::Misconfigured {
                effect: self.name,
                message: "OnUnknown::Reconcile needs a reconcile function (Effect::reconcile)"
                    .to_string(),
            });
        }
        let ledger = &scope.ledger;
        let start = EffectStart::new(
            key.as_str(),
            self.ctx.thread_id(),
            self.ctx.node_id().as_str(),
            self.name.as_str(),
        );
        let prior = ledger
            .begin(&start)
            .await
            .map_err(|e| self.store(&key, e))?;
        let entry = match prior {
            None => return self.call_and_record(&key, call).await,
            Some(e) => e,
        };
        if entry.state == EffectState::Done {
            self.note(&key, EffectOutcome::Replayed, entry.starts);
            return self.decode(&key, entry.result.unwrap_or(Value::Null));
        }
        self.unknown(&key, &entry);
        match self.on_unknown {
            OnUnknown::Fail => {
                self.note(&key, EffectOutcome::Failed, entry.starts);
                Err(EffectError::UnknownOutcome {
                    effect: self.name,
                    key: key.to_string(),
                    starts: entry.starts,
                })
            }
            OnUnknown::RetrySameKey => {
                self.note(&key, EffectOutcome::RetriedSameKey, entry.starts);
                self.call_again(&key, call).await
            }
            OnUnknown::Reconcile => {
                let taken = self
                    .reconciler
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                let Some(check) = taken else {
                    // Checked before the call: unreachable.
                    return Err(EffectError::Misconfigured {
                        effect: self.name,
                        message: "OnUnknown::Reconcile needs a reconcile function".to_string(),
                    });
                };
                match check(key.clone()).await {
                    Ok(Some(found)) => {
                        self.note(&key, EffectOutcome::ReconciledDone, entry.starts);
                        self.record(&key, found).await
                    }
                    Ok(None) => {
                        self.note(&key, EffectOutcome::ReconciledNotDone, entry.starts);
                        self.call_again(&key, call).await
                    }
                    Err(message) => Err(EffectError::Reconcile {
                        effect: self.name,
                        key: key.to_string(),
                        message: redact_secrets(&message),
                    }),
                }
            }
            OnUnknown::AskHuman => match answered(self.ctx.parley_response(), &key) {
                Some(Answered::Done(result)) => {
                    self.note(&key, EffectOutcome::AnsweredDone, entry.starts);
                    self.record(&key, result).await
                }
                Some(Answered::NotDone) => {
                    self.note(&key, EffectOutcome::AnsweredNotDone, entry.starts);
                    self.call_again(&key, call).await
                }
                Some(Answered::Failed) => {
                    self.note(&key, EffectOutcome::Failed, entry.starts);
                    Err(EffectError::UnknownOutcome {
                        effect: self.name,
                        key: key.to_string(),
                        starts: entry.starts,
                    })
                }
                None => {
                    let mut context = json!({
                        "effect_key": key.as_str(),
                        "effect": self.name,
                        "thread_id": self.ctx.thread_id(),
                        "node_id": self.ctx.node_id().as_str(),
                        "task_key": self.ctx.task().map(|t| t.task_key.clone()),
                        "starts": entry.starts,
                        "answers": ["done", "not_done", "failed"],
                    });
                    redact_json(&mut context);
                    let request = ParleyRequest::new(format!(
                        "Did effect `{}` (idempotency key {key}) take place? Its call was sent and no result was recorded.",
                        self.name
                    ))
                    .with_payload(context);
                    scope.ask(ask_id(self.ctx), request);
                    self.note(&key, EffectOutcome::AskedHuman, entry.starts);
                    Err(EffectError::NeedsHuman {
                        effect: self.name,
                        key: key.to_string(),
                    })
                }
            },
        }
    }

    async fn call_again<T, E, F, Fut>(&self, key: &EffectKey, call: F) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display,
        F: FnOnce(EffectKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.ledger()?
            .restart(key.as_str())
            .await
            .map_err(|e| self.store(key, e))?;
        self.call_and_record(key, call).await
    }

    async fn call_and_record<T, E, F, Fut>(
        &self,
        key: &EffectKey,
        call: F,
    ) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display,
        F: FnOnce(EffectKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let out = match call(key.clone()).await {
            Ok(out) => out,
            Err(e) => {
                self.note(key, EffectOutcome::CallFailed, 0);
                return Err(EffectError::Call {
                    effect: self.name.clone(),
                    key: key.to_string(),
                    message: redact_secrets(&e.to_string()),
                });
            }
        };
        let value = serde_json::to_value(out).map_err(|e| self.result_error(key, e.to_string()))?;
        let recorded = self.record(key, value).await?;
        self.note(key, EffectOutcome::Done, 0);
        Ok(recorded)
    }

    /// Records `value` as the effect's result and returns it as `T`.
    async fn record<T: DeserializeOwned>(
        &self,
        key: &EffectKey,
        mut value: Value,
    ) -> Result<T, EffectError> {
        redact_json(&mut value);
        let bytes = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        if bytes > self.max_result_bytes {
            return Err(self.result_error(
                key,
                format!(
                    "the result takes {bytes} bytes as JSON, over the limit of {} (Effect::with_max_result_bytes); it was not recorded",
                    self.max_result_bytes
                ),
            ));
        }
        // Checked before it is recorded: a result of the wrong type would
        // fail every replay.
        let typed = self.decode(key, value.clone())?;
        self.ledger()?
            .finish(key.as_str(), &value)
            .await
            .map_err(|e| self.store(key, e))?;
        Ok(typed)
    }

    fn decode<T: DeserializeOwned>(&self, key: &EffectKey, value: Value) -> Result<T, EffectError> {
        serde_json::from_value(value).map_err(|e| {
            self.result_error(
                key,
                format!("the result does not decode as the call's type: {e}"),
            )
        })
    }

    fn ledger(&self) -> Result<&Arc<dyn EffectLedger>, EffectError> {
        self.ctx
            .shared
            .effects
            .as_ref()
            .map(|s| &s.ledger)
            .ok_or_else(|| EffectError::NoLedger {
                effect: self.name.clone(),
            })
    }

    fn store(&self, key: &EffectKey, source: StoreError) -> EffectError {
        EffectError::Store {
            effect: self.name.clone(),
            key: key.to_string(),
            source,
        }
    }

    fn result_error(&self, key: &EffectKey, message: String) -> EffectError {
        EffectError::Unrecordable {
            effect: self.name.clone(),
            key: key.to_string(),
            message,
        }
    }

    /// Traces and streams an unknown outcome, with its key and policy.
    fn unknown(&self, key: &EffectKey, entry: &EffectEntry) {
        tracing::warn!(
            effect_key = %key,
            effect = %self.name,
            node_id = %self.ctx.node_id(),
            thread_id = %self.ctx.thread_id(),
            starts = entry.starts,
            policy = self.on_unknown.name(),
            "aegis effect: unknown outcome (started, no result recorded)"
        );
        self.note(key, EffectOutcome::Unknown, entry.starts);
    }

    /// Notes what became of the effect, for its node's record, and tells
    /// the run's stream (a custom event: `{"effect": name, "effect_key":
    /// key, "state": outcome, ...}`) when someone listens.
    fn note(&self, key: &EffectKey, outcome: EffectOutcome, starts: u32) {
        if let Some(scope) = &self.ctx.shared.effects {
            scope.note(
                (
                    self.ctx.thread_id().to_string(),
                    self.ctx.node_id().to_string(),
                    self.ctx.task().map(|t| t.task_key.clone()),
                ),
                EffectNote {
                    attempt: self.ctx.attempt(),
                    name: self.name.clone(),
                    key: key.to_string(),
                    outcome,
                },
            );
        }
        if self.ctx.is_streaming() {
            self.ctx.emit(json!({
                "effect": self.name,
                "effect_key": key.as_str(),
                "state": outcome.name(),
                "starts": starts,
                "policy": self.on_unknown.name(),
            }));
        }
    }
}
