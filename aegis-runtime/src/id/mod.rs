//! Identities: node ids and thread ids, with the rules every store and the
//! engine apply to them. A leaf: `graph`, `error` and `waypoint` all use it.

mod node_id;
mod shared;
mod thread_id;

pub use node_id::{END, NodeId, START};
pub use shared::{GraphFingerprint, ThreadId};
pub use thread_id::{
    BATTALION_SEPARATOR, MAX_THREAD_ID_BYTES, ThreadIdError, battalion_thread_id,
    validate_root_thread_id, validate_thread_id,
};
