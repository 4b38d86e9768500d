//! The export queue: finished spans wait in a bounded channel for one
//! exporting thread, so the engine never waits on the collector. A span
//! that finds the queue full is dropped and counted; a collector that is
//! slow or gone costs queued spans, never a run's time.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// How often the exporting thread looks for a flush or a shutdown while
/// no span arrives.
const TICK: Duration = Duration::from_millis(50);

/// What the exporting thread is asked besides exporting spans.
enum Control {
    /// Export everything queued now; answer when done.
    Flush(mpsc::Sender<OTelSdkResult>),
    /// Export what is queued, shut the exporter down and stop.
    Shutdown(mpsc::Sender<OTelSdkResult>),
}

/// A span processor with a bounded queue in front of one exporting thread.
pub(super) struct QueueProcessor {
    spans: SyncSender<SpanData>,
    control: Mutex<mpsc::Sender<Control>>,
    dropped: Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set by an explicit shutdown ([`Otel::shutdown`](super::Otel::shutdown)),
    /// which waits for the queue to drain. The tracer provider's own
    /// shutdown when its last handle drops finds it unset and waits for
    /// nothing: a collector that is gone never holds up a process's exit.
    explicit: Arc<AtomicBool>,
}

impl fmt::Debug for QueueProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueProcessor")
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The queue's bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) capacity: usize,
    pub(super) batch: usize,
    pub(super) delay: Duration,
}

impl QueueProcessor {
    /// Starts the exporting thread for `exporter`; `dropped` counts the
    /// spans the full queue turned away.
    pub(super) fn start<E: SpanExporter + 'static>(
        exporter: E,
        bounds: Bounds,
        dropped: Arc<AtomicU64>,
        explicit: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let (spans, queued) = mpsc::sync_channel(bounds.capacity.max(1));
        let (control, asked) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("aegis-otel-export".to_string())
            .spawn(move || export_loop(exporter, bounds, &queued, &asked))?;
        Ok(QueueProcessor {
            spans,
            control: Mutex::new(control),
            dropped,
            thread: Mutex::new(Some(thread)),
            explicit,
        })
    }

    fn ask(
        &self,
        make: impl FnOnce(mpsc::Sender<OTelSdkResult>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(make(tx));
        if sent.is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => {}
            // Full, or the thread is gone: never wait, count it.
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                if let Some(observer) = crate::trace::observe::observer() {
                    observer.span_dropped();
                }
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if !self.explicit.load(Ordering::Acquire) {
            // The provider's last handle dropped: the thread exports what
            // it can and stops on its own; nobody waits for it.
            let (reply, _) = mpsc::channel();
            let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
            let _ = control.send(Control::Shutdown(reply));
            return Ok(());
        }
        let result = self.ask(Control::Shutdown, timeout);
        if result.is_ok()
            && let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            let _ = thread.join();
        }
        result
    }
}

/// The exporting thread: batches of at most `bounds.batch` spans, sent when
/// full, when `bounds.delay` passed since the batch's first span, or on a
/// flush. One export at a time; the exporter bounds each (its timeout).
fn export_loop<E: SpanExporter>(
    mut exporter: E,
    bounds: Bounds,
    queued: &Receiver<SpanData>,
    asked: &Receiver<Control>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(bounds.batch);
    let mut since: Option<Instant> = None;
    loop {
        match queued.recv_timeout(TICK) {
            Ok(span) => {
                since.get_or_insert_with(Instant::now);
                batch.push(span);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let _ = export(&exporter, &mut batch);
                let _ = exporter.shutdown();
                return;
            }
        }
        let due = since.is_some_and(|s| s.elapsed() >= bounds.delay);
        if batch.len() >= bounds.batch || due {
            let _ = export(&exporter, &mut batch);
            since = None;
        }
        match asked.try_recv() {
            Ok(Control::Flush(reply)) => {
                let result = drain(&exporter, queued, &mut batch, bounds.batch);
                since = None;
                let _ = reply.send(result);
            }
            Ok(Control::Shutdown(reply)) => {
                let result = drain(&exporter, queued, &mut batch, bounds.batch);
                let shut = exporter.shutdown();
                let _ = reply.send(result.and(shut));
                return;
            }
            Err(_) => {}
        }
    }
}

/// Exports everything queued so far, a batch at a time.
fn drain<E: SpanExporter>(
    exporter: &E,
    queued: &Receiver<SpanData>,
    batch: &mut Vec<SpanData>,
    size: usize,
) -> OTelSdkResult {
    let mut result = Ok(());
    loop {
        while batch.len() < size {
            match queued.try_recv() {
                Ok(span) => batch.push(span),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            return result;
        }
        let full = batch.len() >= size;
        result = result.and(export(exporter, batch));
        if !full {
            return result;
        }
    }
}

fn export<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>) -> OTelSdkResult {
    if batch.is_empty() {
        return Ok(());
    }
    let spans = std::mem::take(batch);
    let result = futures::executor::block_on(exporter.export(spans));
    if let Err(e) = &result {
        tracing::debug!(target: "aegis_otel", error = %e, "aegis otel: export failed; the batch is lost");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::SpanExporter;

    /// An exporter whose every export waits until the test ends.
    #[derive(Debug)]
    struct Stuck(Mutex<mpsc::Receiver<()>>);

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.0.lock().unwrap_or_else(|p| p.into_inner()).recv();
            Ok(())
        }
    }

    fn span() -> SpanData {
        use opentelemetry::trace::{
            SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes([1; 16]),
                SpanId::from_bytes([1; 8]),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "stuck".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    /// The provider's own shutdown (its last handle dropped, no
    /// `Otel::shutdown`) returns at once although the exporter is stuck in
    /// an export; an explicit one waits, up to its timeout.
    #[test]
    fn only_an_explicit_shutdown_waits_for_a_stuck_exporter() {
        let (_release, stuck) = mpsc::channel();
        let explicit = Arc::new(AtomicBool::new(false));
        let bounds = Bounds {
            capacity: 4,
            batch: 1,
            delay: Duration::ZERO,
        };
        let queue = QueueProcessor::start(
            Stuck(Mutex::new(stuck)),
            bounds,
            Arc::default(),
            explicit.clone(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        queue.on_end(span());
        // The implicit shutdown is asked for an hour: it must not take it.
        let (done, finished) = mpsc::channel();
        let queue = Arc::new(queue);
        let q = queue.clone();
        std::thread::spawn(move || {
            let _ = done.send(q.shutdown_with_timeout(Duration::from_secs(3600)));
        });
        let result = finished.recv_timeout(Duration::from_secs(30));
        assert!(matches!(result, Ok(Ok(()))), "{result:?}");

        let (_release, stuck) = mpsc::channel();
        explicit.store(true, Ordering::Release);
        let queue =
            QueueProcessor::start(Stuck(Mutex::new(stuck)), bounds, Arc::default(), explicit)
                .unwrap_or_else(|e| panic!("{e}"));
        queue.on_end(span());
        let waited = queue.shutdown_with_timeout(Duration::from_millis(200));
        assert!(
            matches!(waited, Err(OTelSdkError::Timeout(_))),
            "{waited:?}"
        );
    }
}
