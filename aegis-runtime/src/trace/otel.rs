//! OpenTelemetry traces (feature `otel`): the engine's `tracing` spans,
//! exported as OTLP over HTTP/protobuf.
//!
//! The engine always opens its spans; without a subscriber that wants them
//! they cost a disabled-callsite check each. [`Otel::layer`] wants them:
//!
//! | span | attributes |
//! |---|---|
//! | `aegis.run` | `thread_id`, `resumed`, `outcome` |
//! | `aegis.superstep` | `thread_id`, `superstep`, `activations` |
//! | `aegis.node` (named `node` or `node[task]`) | `node_id`, `task_key`, `superstep`, `cache_hit`, `cache_origin`, `outcome` |
//! | `aegis.attempt` | `attempt`, `outcome`, `transience`, `error`, `timeout` (its kind), `served_by`, `chain_position`, `model`; on a failure, what follows: `retry_delay_ms` (the wait, jitter and a respected `Retry-After` floor included), `retry_after_ms` (that floor), or `retry_skipped` (the deadline it would overrun) and `retry_remaining_ms` |
//! | `aegis.backoff` | `attempt` (the one it waits for), `delay_ms` |
//! | `aegis.llm` (named `chat {model}`, kind client) | GenAI conventions: `gen_ai.operation.name`, `gen_ai.system`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `error.type`; and `aegis.served_by`, `aegis.chain_position`; a fallback hop is an event on it |
//! | `aegis.llm.provider` | one per provider a fallback chain tries: `gen_ai.system`, `aegis.chain_position`, `error.type`, `aegis.transience` |
//!
//! Failed runs, nodes, attempts and calls have the span status `ERROR`.
//!
//! Exporting never slows a run: finished spans go into a bounded queue
//! ([`OtelConfig::with_queue_capacity`]) that one thread empties in batches;
//! a span finding it full is dropped and counted ([`Otel::dropped_spans`],
//! and `aegis_otel_spans_dropped_total` when metrics are installed).

mod queue;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use queue::{Bounds, QueueProcessor};

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (an endpoint that is not a URL).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
    /// The exporting thread could not be started.
    #[error("the span export thread could not be started: {0}")]
    Thread(String),
    /// Spans could not be flushed or the exporter shut down in time.
    #[error("spans could not be flushed: {0}")]
    Flush(String),
}

/// Where and how spans are exported.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans
    /// go to its `/v1/traces`.
    pub endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// How many finished spans may wait for export; beyond, they are
    /// dropped and counted. Default 2048.
    pub queue_capacity: usize,
    /// The most spans per export request. Default 512.
    pub batch_size: usize,
    /// How long a span may wait for its batch to fill. Default 1 s.
    pub batch_delay: Duration,
    /// How long one export request may take before it is abandoned (its
    /// spans lost). Default 10 s.
    pub export_timeout: Duration,
}

impl OtelConfig {
    /// Spans to the collector at `endpoint`, as service `aegis`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        OtelConfig {
            endpoint: endpoint.into(),
            service_name: "aegis".to_string(),
            queue_capacity: 2048,
            batch_size: 512,
            batch_delay: Duration::from_secs(1),
            export_timeout: Duration::from_secs(10),
        }
    }

    /// Sets [`service_name`](Self::service_name).
    #[must_use]
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Sets [`queue_capacity`](Self::queue_capacity) (at least 1).
    #[must_use]
    pub fn with_queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity.max(1);
        self
    }

    /// Sets [`batch_size`](Self::batch_size) (at least 1).
    #[must_use]
    pub fn with_batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// Sets [`batch_delay`](Self::batch_delay).
    #[must_use]
    pub fn with_batch_delay(mut self, delay: Duration) -> Self {
        self.batch_delay = delay;
        self
    }

    /// Sets [`export_timeout`](Self::export_timeout).
    #[must_use]
    pub fn with_export_timeout(mut self, timeout: Duration) -> Self {
        self.export_timeout = timeout;
        self
    }

    fn traces_url(&self) -> String {
        let base = self.endpoint.trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_string()
        } else {
            format!("{base}/v1/traces")
        }
    }
}

/// A running span exporter: give its [`layer`](Otel::layer) to a
/// `tracing_subscriber` registry. Dropping it (its last clone and the
/// layer's tracer) does not wait for the collector: queued spans go out
/// in the background if they can; to be sure they went, call
/// [`Otel::shutdown`] (or [`Otel::flush`]) before the process exits.
///
/// ```no_run
/// use aegis_runtime::trace::otel::{Otel, OtelConfig};
/// use tracing_subscriber::prelude::*;
/// let otel = Otel::new(OtelConfig::new("http://127.0.0.1:4318")).unwrap();
/// tracing_subscriber::registry().with(otel.layer()).init();
/// // ... runs ...
/// otel.shutdown().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Otel {
    provider: SdkTracerProvider,
    dropped: Arc<AtomicU64>,
    /// Set by [`Otel::shutdown`]: only then does shutting down wait for
    /// the queue (see `QueueProcessor`).
    explicit: Arc<AtomicBool>,
}

impl Otel {
    /// Starts exporting to `config.endpoint`. Builds its HTTP client on a
    /// thread of its own, so it may be called inside or outside a tokio
    /// runtime.
    pub fn new(config: OtelConfig) -> Result<Self, OtelError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url())
            .with_timeout(config.export_timeout)
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        let dropped = Arc::new(AtomicU64::new(0));
        let explicit = Arc::new(AtomicBool::new(false));
        let processor = QueueProcessor::start(
            exporter,
            Bounds {
                capacity: config.queue_capacity,
                batch: config.batch_size,
                delay: config.batch_delay,
            },
            dropped.clone(),
            explicit.clone(),
        )
        .map_err(|e| OtelError::Thread(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name)
                    .build(),
            )
            .build();
        Ok(Otel {
            provider,
            dropped,
            explicit,
        })
    }

    /// The `tracing` layer exporting Aegis's spans (target `aegis_runtime`,
    /// `DEBUG` and up) and the events inside them (a fallback hop, a failed
    /// attempt's warning) as span events.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("aegis");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(Targets::new().with_target("aegis_runtime", tracing::Level::DEBUG))
    }

    /// Spans dropped so far because the export queue was full.
    pub fn dropped_spans(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Exports every finished span now; waits for the collector (each
    /// request bounded by the export timeout). Blocks: call it from a
    /// blocking context (`tokio::task::spawn_blocking`), not a runtime
    /// worker.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.provider
            .force_flush()
            .map_err(|e| OtelError::Flush(e.to_string()))
    }

    /// Exports what is queued and stops. Blocks, like [`Otel::flush`].
    pub fn shutdown(&self) -> Result<(), OtelError> {
        self.explicit.store(true, Ordering::Release);
        self.provider
            .shutdown()
            .map_err(|e| OtelError::Flush(e.to_string()))
    }
}
