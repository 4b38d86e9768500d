//! The `/metrics` endpoint: a minimal HTTP/1.1 server on a tokio listener,
//! one short-lived connection per scrape. Requests are read with a bound on
//! their size and their time, so a client that sends nothing, or too much,
//! costs a task for a few seconds at most.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::Metrics;

/// The most of a request head read before answering 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request head, and to read the answer.
const CLIENT_LIMIT: Duration = Duration::from_secs(5);
/// The OpenMetrics text format's media type.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running `/metrics` endpoint ([`Metrics::serve`]); it stops when
/// dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl MetricsServer {
    pub(super) async fn bind(metrics: Arc<Metrics>, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, most likely: try again shortly
                    // rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CLIENT_LIMIT, answer(stream, &metrics)).await;
                });
            }
        });
        Ok(MetricsServer { addr, accept })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Reads one request head and answers it; the connection then closes.
async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return reply(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, target) = (parts.next(), parts.next());
    let path = target.map(|t| t.split(|b| *b == b'?').next().unwrap_or_default());
    match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => {
            let body = metrics.render().await;
            reply(&mut stream, "200 OK", CONTENT_TYPE, &body).await
        }
        (Some(b"GET"), _) => reply(&mut stream, "404 Not Found", "text/plain", "").await,
        _ => reply(&mut stream, "405 Method Not Allowed", "text/plain", "").await,
    }
}

async fn reply(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
