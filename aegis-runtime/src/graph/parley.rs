//! Parleys: a node suspends the run to ask a human, and is re-run with the
//! answer on resume.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// What happens when a parley is answered after it expired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ParleyExpiry {
    /// The resume fails with `EngineError::ParleyExpired`.
    #[default]
    Fail,
    /// The node is re-run with this response instead of the late one.
    Proceed(Value),
}

/// A request for human input: `Directive::parley(ParleyRequest::new(..))`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParleyRequest {
    /// What to ask.
    pub prompt: String,
    /// Anything the human needs to see (a draft, a diff, ...).
    pub payload: Value,
    /// How long the question stays open, measured from the waypoint's
    /// `created_at` and checked on resume; `None`: forever.
    pub expires_after: Option<Duration>,
    /// What an expired parley does.
    pub on_expire: ParleyExpiry,
}

impl ParleyRequest {
    /// Sets [`on_expire`](Self::on_expire): what an expired parley does.
    #[must_use]
    pub fn with_on_expire(mut self, on_expire: ParleyExpiry) -> Self {
        self.on_expire = on_expire;
        self
    }
}

impl ParleyRequest {
    /// A request that never expires.
    pub fn new(prompt: impl Into<String>) -> Self {
        ParleyRequest {
            prompt: prompt.into(),
            payload: Value::Null,
            expires_after: None,
            on_expire: ParleyExpiry::Fail,
        }
    }

    /// Attaches a payload.
    pub fn with_payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// Sets the expiry and what happens after it.
    pub fn expires_after(mut self, after: Duration, on_expire: ParleyExpiry) -> Self {
        self.expires_after = Some(after);
        self.on_expire = on_expire;
        self
    }
}

/// A human's answer to a parley, handed to the node on resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParleyResponse {
    /// The answer.
    pub value: Value,
}

impl ParleyResponse {
    /// An answer.
    pub fn new(value: Value) -> Self {
        ParleyResponse { value }
    }

    /// Whether the answer approves: `true`, `"approve"`, `"approved"`,
    /// `"yes"`, or an object with `"approved": true`. Gates route on it.
    pub fn is_approval(&self) -> bool {
        match &self.value {
            Value::Bool(b) => *b,
            Value::String(s) => matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "approve" | "approved" | "yes" | "y"
            ),
            Value::Object(o) => o.get("approved") == Some(&Value::Bool(true)),
            _ => false,
        }
    }
}

/// One task of a muster, as the worker sees it through `NodeContext::task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MusterTask {
    /// The task's key, unique within its muster.
    pub task_key: String,
    /// The task's input.
    pub payload: Value,
    /// The task's position in its muster; deltas merge in this order.
    pub index: u32,
}

impl MusterTask {
    /// Task `index` of a muster, keyed `task_key`, carrying `payload`.
    pub fn new(task_key: impl Into<String>, payload: Value, index: u32) -> Self {
        MusterTask {
            task_key: task_key.into(),
            payload,
            index,
        }
    }
}
