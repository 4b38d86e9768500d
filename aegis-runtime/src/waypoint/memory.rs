//! `InMemoryWaypointStore`: waypoints kept in process memory.

use async_trait::async_trait;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::effects::InMemoryEffectLedger;
use super::kept::{GraphOf, Kept};
use super::{Draft, Waypoint, WaypointStore};
use crate::error::StoreError;
use crate::id::{ThreadId, validate_thread_id};

/// Waypoints in process memory: for tests, demos and short-lived runs.
///
/// Snapshots share unchanged values, so keeping every waypoint of a long run
/// costs in proportion to the deltas, not to the state times the supersteps:
/// a superstep of a chain that rewrites one small field keeps about 325
/// bytes: its waypoint in 144 (without the thread id, the position and the
/// graph, which its thread holds once; its one record in place), the new
/// state's field list and value, and a visit count.
#[derive(Debug, Default)]
pub struct InMemoryWaypointStore {
    threads: Mutex<Threads>,
    /// Its effect ledger ([`WaypointStore::effect_ledger`]).
    effects: Arc<InMemoryEffectLedger>,
}

/// Every thread's waypoints, and which thread the last append went to.
#[derive(Debug, Default)]
struct Threads {
    /// Each thread's position in `list`.
    by_id: HashMap<String, usize>,
    list: Vec<Thread>,
    /// A run appends every superstep to one thread: found again by
    /// comparing its id, not by hashing it and probing the map on every
    /// append. Its id was validated when it was first appended to.
    last: Option<(ThreadId, usize)>,
}

impl Threads {
    /// Where the thread `id` names sits in `list`: the last one's without
    /// the map.
    fn find(&self, id: &str) -> Option<usize> {
        match &self.last {
            Some((last, at)) if last.as_str() == id => Some(*at),
            _ => self.by_id.get(id).copied(),
        }
    }

    /// The thread `id` names, if it has one, made the last one.
    fn get_mut(&mut self, id: &Arc<str>) -> Option<&mut Thread> {
        let at = self.find(id)?;
        if !matches!(self.last, Some((_, last)) if last == at) {
            self.last = Some((id.clone().into(), at));
        }
        self.list.get_mut(at)
    }

    /// A new thread, made the last one.
    fn insert(&mut self, thread: Thread) {
        let (at, id) = (self.list.len(), thread.id.clone());
        self.by_id.insert(id.to_string(), at);
        self.list.push(thread);
        self.last = Some((id, at));
    }

    /// The thread `id` names, for a read.
    fn get(&self, id: &str) -> Option<&Thread> {
        self.list.get(self.find(id)?)
    }
}

/// Waypoints per chunk of a thread's history.
const CHUNK: usize = 64;

/// One thread's waypoints, in chunks that are never moved once filled: a
/// waypoint is a few hundred bytes, and a growing `Vec` of them would copy
/// every one again each time it doubled. Each is [`Kept`] without the
/// thread's id and its position, which are the same for all of them or
/// implied.
#[derive(Debug)]
struct Thread {
    id: ThreadId,
    chunks: Vec<Vec<Kept>>,
    /// The graph the waypoints from each position on were written under
    /// (one entry per run, nearly always): a waypoint keeps none itself.
    graphs: Vec<(u64, GraphOf)>,
    len: u64,
}

impl Thread {
    fn new(id: ThreadId) -> Self {
        Thread {
            id,
            chunks: Vec::new(),
            graphs: Vec::new(),
            len: 0,
        }
    }

    /// Appends `draft`, if it is the thread's next waypoint.
    fn append(&mut self, draft: &mut Draft<'_>) -> Result<(), StoreError> {
        if draft.seq != self.len {
            return Err(StoreError::Conflict {
                thread_id: draft.thread_id.to_string(),
                expected_seq: draft.seq,
                actual_next: self.len,
            });
        }
        if !self.graphs.last().is_some_and(|(_, g)| g.holds(draft)) {
            self.graphs.push((self.len, GraphOf::of(draft)));
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            // Built where it goes: a waypoint is a few hundred bytes.
            chunk.push(Kept::new(draft));
        }
        self.len += 1;
        Ok(())
    }

    /// The graph the waypoint at `seq` was written under.
    fn graph_at(&self, seq: u64) -> Option<&GraphOf> {
        let after = self.graphs.partition_point(|(from, _)| *from <= seq);
        self.graphs.get(after.checked_sub(1)?).map(|(_, g)| g)
    }

    fn latest(&self) -> Option<Waypoint> {
        let seq = self.len.checked_sub(1)?;
        let kept = self.chunks.last()?.last()?;
        Some(kept.waypoint(&self.id, seq, self.graph_at(seq)?))
    }

    fn history(&self) -> Vec<Waypoint> {
        let mut graphs = self.graphs.iter().peekable();
        let mut graph = None;
        (0u64..)
            .zip(self.chunks.iter().flatten())
            .filter_map(|(seq, kept)| {
                // The graphs in order of the positions they start at.
                while let Some((_, g)) = graphs.next_if(|(from, _)| *from <= seq) {
                    graph = Some(g);
                }
                Some(kept.waypoint(&self.id, seq, graph?))
            })
            .collect()
    }
}

impl InMemoryWaypointStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// `put`, which never waits, of a waypoint drafted by the engine
    /// ([`Draft`]): the engine writes its own store this way, without a
    /// `Waypoint` in between. What the draft owns is taken out of it.
    pub(crate) fn append(&self, draft: &mut Draft<'_>) -> Result<(), StoreError> {
        let mut threads = self.lock()?;
        if let Some(thread) = threads.get_mut(draft.thread_id) {
            return thread.append(draft);
        }
        // A new thread: the only time its id is checked.
        validate_thread_id(draft.thread_id).map_err(StoreError::InvalidThreadId)?;
        let mut thread = Thread::new(draft.thread_id.clone().into());
        thread.append(draft)?;
        threads.insert(thread);
        Ok(())
    }

    /// `store` itself when it is an `InMemoryWaypointStore`. The engine asks
    /// once, when it is built, and then lends this store its drafts
    /// ([`InMemoryWaypointStore::append`]); any other store is written
    /// through [`WaypointStore::put`].
    pub(crate) fn recognise<S: WaypointStore>(store: &Arc<S>) -> Option<Arc<Self>> {
        let store: Arc<dyn Any + Send + Sync> = store.clone();
        store.downcast().ok()
    }

    /// Its effect ledger, as the in-memory run queue fences it.
    pub(crate) fn effects(&self) -> &Arc<InMemoryEffectLedger> {
        &self.effects
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Threads>, StoreError> {
        self.threads
            .lock()
            .map_err(|_| StoreError::Backend("in-memory store lock poisoned".to_string()))
    }
}

#[async_trait]
impl WaypointStore for InMemoryWaypointStore {
    fn effect_ledger(&self) -> Option<Arc<dyn crate::graph::EffectLedger>> {
        Some(self.effects.clone())
    }

    async fn put(&self, waypoint: Waypoint) -> Result<(), StoreError> {
        waypoint.lend(|mut draft| self.append(&mut draft))
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self.lock()?.get(thread_id).and_then(Thread::latest))
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Waypoint>, StoreError> {
        validate_thread_id(thread_id).map_err(StoreError::InvalidThreadId)?;
        Ok(self
            .lock()?
            .get(thread_id)
            .map(Thread::history)
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Battlefield;
    use crate::waypoint::WaypointStatus;

    fn at(seq: u64) -> Waypoint {
        on("t", seq)
    }

    fn on(thread: &str, seq: u64) -> Waypoint {
        Waypoint::new(thread, seq, WaypointStatus::Running, Battlefield::new())
    }

    #[tokio::test]
    async fn interleaved_threads_keep_their_own_histories() {
        // The last thread appended to is found without the map: switching
        // back and forth must still land every waypoint on its own thread.
        let store = InMemoryWaypointStore::new();
        for seq in 0..3 {
            store.put(on("a", 2 * seq)).await.unwrap();
            for thread in ["b", "c"] {
                store.put(on(thread, seq)).await.unwrap();
            }
            store.put(on("a", 2 * seq + 1)).await.unwrap();
        }
        let seqs = |h: Vec<Waypoint>| h.iter().map(|w| w.seq).collect::<Vec<_>>();
        assert_eq!(seqs(store.history("a").await.unwrap()), [0, 1, 2, 3, 4, 5]);
        assert!(matches!(
            store.put(on("a", 4)).await,
            Err(StoreError::Conflict { actual_next: 6, .. })
        ));
        for thread in ["b", "c"] {
            assert_eq!(seqs(store.history(thread).await.unwrap()), [0, 1, 2]);
            assert_eq!(store.latest(thread).await.unwrap().map(|w| w.seq), Some(2));
        }
        assert!(store.history("d").await.unwrap().is_empty());
        // A new thread's id is checked; a refused one leaves no thread.
        assert!(matches!(
            store.put(on("bad\0id", 0)).await,
            Err(StoreError::InvalidThreadId(_))
        ));
        assert!(matches!(
            store.put(on("late", 1)).await,
            Err(StoreError::Conflict { actual_next: 0, .. })
        ));
        store.put(on("late", 0)).await.unwrap();
        assert_eq!(store.latest("late").await.unwrap().map(|w| w.seq), Some(0));
    }

    #[tokio::test]
    async fn keeps_order_across_chunks_and_refuses_a_gap() {
        let store = InMemoryWaypointStore::new();
        let n = 3 * CHUNK as u64 + 5;
        for seq in 0..n {
            store.put(at(seq)).await.unwrap();
        }
        let history = store.history("t").await.unwrap();
        assert_eq!(
            history.iter().map(|w| w.seq).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        assert_eq!(store.latest("t").await.unwrap().map(|w| w.seq), Some(n - 1));
        for seq in [n - 1, n + 1] {
            assert!(matches!(
                store.put(at(seq)).await,
                Err(StoreError::Conflict { actual_next, .. }) if actual_next == n
            ));
        }
    }

    #[tokio::test]
    async fn each_waypoint_comes_back_with_the_graph_it_was_written_under() {
        use crate::graph::GraphManifest;
        use crate::id::GraphFingerprint;
        use std::sync::Arc;
        // A run under one graph, a migration to another, and a manifest
        // that is equal but not the same allocation: each is its own graph.
        let empty = || GraphManifest {
            nodes: Default::default(),
            fields: Default::default(),
        };
        let manifest = Arc::new(empty());
        let graphs = [
            ("v6:one", Some(manifest.clone())),
            ("v6:one", Some(manifest.clone())),
            ("v6:two", Some(manifest.clone())),
            ("v6:two", Some(Arc::new(empty()))),
            ("v6:two", None),
            ("v6:one", None),
        ];
        let store = InMemoryWaypointStore::new();
        let mut written = Vec::new();
        for (seq, (fingerprint, manifest)) in (0u64..).zip(&graphs) {
            for _ in 0..3 {
                let mut w = at(written.len() as u64);
                w.fingerprint = GraphFingerprint::from(*fingerprint);
                w.manifest = manifest.clone();
                store.put(w.clone()).await.unwrap();
                written.push(w);
            }
            let latest = store.latest("t").await.unwrap().unwrap();
            assert_eq!(latest.fingerprint.as_str(), *fingerprint, "{seq}");
        }
        let history = store.history("t").await.unwrap();
        assert_eq!(history.len(), written.len());
        for (back, w) in history.iter().zip(&written) {
            assert_eq!(back.fingerprint, w.fingerprint, "{}", w.seq);
            let same = match (&back.manifest, &w.manifest) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            };
            assert!(same, "waypoint {} has its own manifest", w.seq);
        }
        // One entry per change of graph, not per waypoint.
        let threads = store.lock().unwrap();
        assert_eq!(threads.get("t").map(|t| t.graphs.len()), Some(5));
    }
}
