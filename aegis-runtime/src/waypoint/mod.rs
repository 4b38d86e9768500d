//! Waypoints (one per superstep), the stores that keep them, and Chronicle.

mod chronicle;
mod memory;
mod store;
mod types;

pub use chronicle::Chronicle;
pub use memory::InMemoryWaypointStore;
pub use store::{StoreError, WaypointStore};
pub use types::{Activation, CompletedActivation, ParleyDelivery, Waypoint, WaypointStatus};
