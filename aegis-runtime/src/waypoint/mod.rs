//! Waypoints (one per superstep), the stores that keep them, and Chronicle.

mod chronicle;
mod memory;
mod store;
mod types;

pub use chronicle::Chronicle;
pub use memory::InMemoryWaypointStore;
pub use store::{StoreError, WaypointStore};
pub use types::{Activation, CompletedActivation, ParleyDelivery, Waypoint, WaypointStatus};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row_stats;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod tips;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use codec::WAYPOINT_FORMAT_VERSION;
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresWaypointStore};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use row_stats::WaypointRowStats;
#[cfg(feature = "sqlite")]
pub use sqlite::{SQLITE_SCHEMA_VERSION, SqliteOptions, SqliteSynchronous, SqliteWaypointStore};
