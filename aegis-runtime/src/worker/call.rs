//! A deadline on every call a worker makes to its queue.

use std::future::Future;
use std::time::Duration;

use super::WorkerError;
use crate::error::StoreError;

/// `call` to the queue, failed after `limit`: a connection that went dark
/// (no reset, no close) must not hold the worker.
pub(super) async fn within<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = Result<T, WorkerError>>,
) -> Result<T, WorkerError> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(WorkerError::Store(StoreError::Backend(format!(
            "the run queue did not answer {what} within {limit:?}"
        ))))
    })
}
