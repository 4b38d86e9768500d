//! Streaming a run to its caller: [`WarEngine::stream`] runs the thread on a
//! task of its own and hands back a [`RunStream`] of [`StreamEvent`]s that
//! ends with the run's outcome.
//!
//! The engine pushes into a bounded queue and never waits for the consumer:
//! when the queue is full, events are dropped and counted, and the consumer
//! later reads one [`StreamEvent::Lagged`] where they would have been. Two
//! events are never dropped, whatever the backlog: the final
//! [`StreamEvent::Finished`], and [`StreamEvent::AttemptAbandoned`], which
//! tells the consumer to discard tokens it already holds.

pub(super) mod events;
mod run_stream;
pub(super) mod tap;

pub use events::{DEFAULT_STREAM_CAPACITY, NodeUpdate, StreamEvent, StreamMode, StreamOptions};
pub use run_stream::RunStream;
pub(crate) use tap::StreamTap;

use std::sync::Arc;

use super::WarEngine;
use super::cursor::Cursor;
use super::finished::Finished;
use crate::graph::{NextStep, ParleyRequest, ParleyResponse, WarGraph};
use crate::id::NodeId;
use crate::state::Battlefield;
use crate::trace::TraceEvent;
use crate::waypoint::WaypointStore;

impl<S: WaypointStore> WarEngine<S> {
    /// [`WarEngine::start`] as a stream of every [`StreamMode`]: see
    /// [`WarEngine::stream_with`].
    pub fn stream(&self, graph: &WarGraph, thread_id: &str, input: serde_json::Value) -> RunStream {
        self.stream_with(graph, thread_id, input, StreamOptions::default())
    }

    /// [`WarEngine::start`] on a task of its own, returning its events as
    /// they happen and its outcome as the last one
    /// ([`StreamEvent::Finished`]; an error `start` would return comes
    /// there too).
    ///
    /// Must be called within a tokio runtime. The graph is cloned (its nodes
    /// are shared, not copied). Events beyond `options`' capacity are
    /// dropped and counted, never waited for. Dropping the stream halts the
    /// run (see [`RunStream`]).
    pub fn stream_with(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        input: serde_json::Value,
        options: StreamOptions,
    ) -> RunStream {
        let (engine, tap) = self.streaming(options);
        let halt = engine.kit.cancellation().clone().drop_guard();
        let (graph, id) = (graph.clone(), thread_id.to_string());
        let run = tokio::spawn(async move { engine.start(&graph, &id, input).await });
        RunStream::new(thread_id, tap, run, halt)
    }

    /// [`WarEngine::resume`] as a stream of every [`StreamMode`].
    pub fn stream_resume(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
    ) -> RunStream {
        self.stream_resume_with(graph, thread_id, response, StreamOptions::default())
    }

    /// [`WarEngine::resume`] as a stream: see [`WarEngine::stream_with`].
    pub fn stream_resume_with(
        &self,
        graph: &WarGraph,
        thread_id: &str,
        response: Option<ParleyResponse>,
        options: StreamOptions,
    ) -> RunStream {
        let (engine, tap) = self.streaming(options);
        let halt = engine.kit.cancellation().clone().drop_guard();
        let (graph, id) = (graph.clone(), thread_id.to_string());
        let run = tokio::spawn(async move { engine.resume(&graph, &id, response).await });
        RunStream::new(thread_id, tap, run, halt)
    }

    /// A superstep of `cur` merged into `state`: the parleys it raised, and for a stream
    /// its writes and the merged state.
    pub(crate) fn superstep_merged(
        &self,
        cur: &Cursor,
        state: &Battlefield,
        finished: &[Finished<'_>],
        requests: &[(NodeId, ParleyRequest)],
    ) {
        for (node_id, request) in requests {
            self.kit.emit(TraceEvent::ParleyRaised {
                thread_id: cur.step.thread_id.to_string(),
                superstep: cur.superstep,
                node_id: node_id.clone(),
                prompt: request.prompt.clone(),
            });
        }
        let Some(tap) = &self.kit.stream else {
            return;
        };
        tap.push_with(StreamMode::Updates, || StreamEvent::Updates {
            thread_id: cur.step.thread_id.to_string(),
            superstep: cur.superstep,
            writes: finished
                .iter()
                .filter(|f| !matches!(f.directive.next, NextStep::Parley(_)))
                .map(|f| NodeUpdate {
                    node_id: f.activation.node_id.clone(),
                    task_key: f.activation.task_key().map(str::to_string),
                    delta: f.directive.delta.clone(),
                })
                .collect(),
        });
        tap.push_with(StreamMode::Values, || StreamEvent::Values {
            thread_id: cur.step.thread_id.to_string(),
            superstep: cur.superstep,
            state: state.clone(),
        });
    }

    /// This engine with a stream attached and a child cancellation token
    /// (cancelled when the stream is dropped).
    fn streaming(&self, options: StreamOptions) -> (WarEngine<S>, Arc<StreamTap>) {
        let tap = StreamTap::new(options);
        let mut engine = self.derived();
        engine.kit.stream = Some(tap.clone());
        (engine, tap)
    }
}
