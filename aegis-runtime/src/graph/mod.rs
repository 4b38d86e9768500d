//! Graphs: node ids, node specs, the `WarGraph` builder, validation,
//! fingerprinting and rendering.

mod aegis_node;
mod cache_rules;
mod context;
mod effect;
mod effect_ledger;
mod emit;
mod fingerprint;
mod input;
mod limits;
mod manifest;
pub(crate) mod meter;
mod migration;
mod muster_rules;
mod node;
pub(crate) mod paladin;
mod parley;
mod render;
mod task_input;
mod validate;
mod war_graph;

pub use aegis_node::{AegisDepsFn, AegisDepsNode, AegisFnNode, AegisNode, AegisNodeFn};
pub(crate) use cache_rules::{cached_nodes, missing_backend_error};
pub(crate) use context::{AttemptShared, Served, ServedSlot, TaskRef, TaskSource};
pub use context::{HeartbeatHandle, IdleHold, NodeContext};
pub(crate) use effect::EffectScope;
pub use effect::{
    DEFAULT_MAX_EFFECT_RESULT_BYTES, Effect, EffectAnswer, EffectError, EffectKey, EffectNote,
    EffectOutcome, OnUnknown,
};
pub(crate) use effect_ledger::EffectOp;
pub use effect_ledger::{EffectEntry, EffectLedger, EffectStart, EffectState};
pub(crate) use emit::{EmitTarget, NodeEmitter};
pub use fingerprint::FINGERPRINT_VERSION;
pub use input::{InputMapping, TemplateError};
pub use limits::EngineLimits;
pub use manifest::{FieldShape, GraphManifest, NodeShape};
pub(crate) use meter::{RunLedger, SpendMeter};
pub use migration::Migration;
pub use node::{Directive, FnNode, NextStep, NodeFuture, NodeKind, NodeSpec, StateNode};
pub(crate) use paladin::{Armament, Paladin};
pub use parley::{MusterTask, ParleyExpiry, ParleyRequest, ParleyResponse};
pub use war_graph::{ConditionalEdges, WarGraph};
