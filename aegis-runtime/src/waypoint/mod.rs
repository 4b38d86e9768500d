//! Waypoints (one per superstep), the stores that keep them, and Chronicle.

mod chronicle;
mod draft;
mod effects;
mod kept;
mod memory;
mod record;
mod store;
mod types;
mod visits;

// Defined with the policies (a graph's meter builds it), public here, with
// the records that hold it.
pub use crate::policy::hop::HopNote;
pub use chronicle::{Chronicle, GraphMove};
pub(crate) use draft::Draft;
pub use effects::InMemoryEffectLedger;
pub use memory::InMemoryWaypointStore;
pub use record::{
    AttemptRecord, HandledFailure, HandlerKind, NodeExecutionRecord, NodeStatus, RetrySkip,
};
pub use store::WaypointStore;
pub use types::{
    Activation, CompletedActivation, ParleyDelivery, PreviousGraph, Waypoint, WaypointStatus,
};
pub(crate) use visits::Visits;

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
pub(crate) use postgres::error::backend as pg_backend;
#[cfg(feature = "postgres")]
pub(crate) use postgres::schema::quote_schema as pg_quote_schema;
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresWaypointStore};
#[cfg(feature = "postgres")]
pub(crate) use postgres::{
    PgEffectFence, PgFence, PgPool, parse_connection as pg_parse_connection,
    tls_connector as pg_tls_connector,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use row_stats::WaypointRowStats;
#[cfg(feature = "sqlite")]
pub use sqlite::{SQLITE_SCHEMA_VERSION, SqliteOptions, SqliteSynchronous, SqliteWaypointStore};
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::{SqliteEffectFence, fenced_effects as sqlite_fenced_effects};
