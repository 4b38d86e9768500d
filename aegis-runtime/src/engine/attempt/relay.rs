//! The hop relay: a Paladin attempt's [`AttemptSink`], through which a
//! fallback chain's hops reach the engine's `Events` stream and trace sinks,
//! naming the node. Built only when something listens; the hop's note on
//! the record (`NodeExecutionRecord::hops`) travels by the attempt's spend
//! meter instead, there for every Paladin attempt, listened to or not.

use std::sync::Arc;

use crate::engine::kit::Kit;
use crate::engine::stream::events::{StreamEvent, StreamMode};
use crate::engine::stream::tap::StreamTap;
use crate::id::NodeId;
use crate::trace::ambient::AttemptSink;
use crate::trace::{TraceEvent, TraceSink};

struct HopRelay {
    node_id: NodeId,
    stream: Option<Arc<StreamTap>>,
    sinks: Vec<Arc<dyn TraceSink>>,
}

impl AttemptSink for HopRelay {
    fn emit(&self, mut event: TraceEvent) {
        if let TraceEvent::FallbackHop { node_id, .. } = &mut event
            && node_id.is_none()
        {
            *node_id = Some(self.node_id.clone());
        }
        // Not logged again: the chain's own `warn!` is the hop's log line.
        if let Some(tap) = &self.stream {
            tap.push_with(StreamMode::Events, || StreamEvent::Trace(event.clone()));
        }
        for sink in &self.sinks {
            sink.emit(event.clone());
        }
    }

    fn covers(&self, sink: &Arc<dyn TraceSink>) -> bool {
        self.sinks
            .iter()
            .any(|s| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(sink)))
    }
}

impl Kit {
    /// The relay of a Paladin attempt of `node_id`, when a stream wants
    /// events or a trace sink is registered.
    pub(super) fn hop_relay(&self, node_id: &NodeId) -> Option<Arc<dyn AttemptSink>> {
        let stream = self
            .stream
            .clone()
            .filter(|tap| tap.wants(StreamMode::Events));
        if stream.is_none() && self.trace_sinks.is_empty() {
            return None;
        }
        Some(Arc::new(HopRelay {
            node_id: node_id.clone(),
            stream,
            sinks: self.trace_sinks.clone(),
        }))
    }
}
