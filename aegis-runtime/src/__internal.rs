//! Hooks for this workspace's own tests, fuzz targets and benchmarks.
//!
//! Everything here is reachable only with the non-default `__internal`
//! feature, is not part of the API, and may change in any release. The
//! items keep their documentation where they are defined.

pub use crate::cache::handle::{CacheLookup, NodeCacheHandle, StoreOutcome};
pub use crate::cache::key::derive_key;
pub use crate::cache::validate::delta_is_cacheable;
pub use crate::error::connection::redact_connection_string;
pub use crate::error::llm::status_transience;
pub use crate::error::redact::{
    EXCERPT_LIMIT, REDACTED, bound_excerpt, map_http_status, parse_retry_after, redact_excerpt,
    redact_secrets, retry_after_hint,
};
pub use crate::llm::anthropic::{AnthropicEvents, AnthropicStreamParser};
pub use crate::llm::openai::{OpenAiEvents, OpenAiStreamParser};
pub use crate::llm::sse::{SseDecoder, SseDialect, SseEvent, SseStreamParser, StreamParser};
pub use crate::policy::backoff::jittered;
pub use crate::state::merge::{Writer, initial_state, merge};
