//! Pictures of a run: [`timeline`] turns a thread's waypoints into a
//! self-contained HTML page (one inline SVG, no script, nothing fetched).
//!
//! A graph's own picture is [`WarGraph::to_mermaid`](crate::graph::WarGraph::to_mermaid).

mod html;
mod timeline;

// The console escapes its pages with the timeline's escape.
#[cfg(feature = "console")]
pub(crate) use html::esc;
pub use timeline::{Timeline, timeline};
