//! Graphs: node ids, node specs, the `WarGraph` builder, validation,
//! fingerprinting and rendering.

mod aegis_node;
mod fingerprint;
mod input;
mod node;
mod node_id;
mod parley;
mod render;
mod validate;
mod war_graph;

pub use aegis_node::{__macro_support, AegisFnNode, AegisNodeFn};
pub(crate) use fingerprint::Canon;
pub use fingerprint::FINGERPRINT_VERSION;
pub use input::{InputMapping, TemplateError};
pub use node::{Directive, FnNode, NextStep, NodeFuture, NodeKind, NodeSpec, StateNode};
pub use node_id::{END, NodeId, START};
pub use parley::{MusterTask, ParleyExpiry, ParleyRequest, ParleyResponse};
pub use war_graph::{ConditionalEdges, WarGraph};
