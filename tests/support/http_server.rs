//! A small hand-written HTTP/1.1 server on 127.0.0.1 for the adapter tests:
//! each connection gets the next scripted reply, then is closed. Requests
//! are recorded so tests can check what the adapters sent.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// Body pieces, written one `write` (and flush) at a time; the body ends
    /// when the connection closes (no Content-Length), as SSE bodies may.
    parts: Vec<Vec<u8>>,
    content_length: bool,
    /// A pause (on tokio's clock) before each part after the first.
    interval: Option<std::time::Duration>,
    /// Close without answering.
    hang_up: bool,
}

impl Reply {
    /// A JSON (or any) body with a Content-Length.
    pub(crate) fn body(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            parts: vec![body.into()],
            content_length: true,
            interval: None,
            hang_up: false,
        }
    }

    /// A JSON value with a Content-Length.
    pub(crate) fn json(status: u16, value: &Value) -> Self {
        Self::body(status, value.to_string())
    }

    /// An event stream written in `parts`, ended by closing the connection.
    pub(crate) fn sse(parts: Vec<&str>) -> Self {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            parts: parts.into_iter().map(|p| p.as_bytes().to_vec()).collect(),
            content_length: false,
            interval: None,
            hang_up: false,
        }
    }

    /// A body of `parts` written `interval` apart, ended by closing the
    /// connection: a provider trickling its answer.
    pub(crate) fn trickle(status: u16, parts: Vec<Vec<u8>>, interval: std::time::Duration) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            parts,
            content_length: false,
            interval: Some(interval),
            hang_up: false,
        }
    }

    /// The reply with every `{ECHO_KEY}` in its body replaced by `key`.
    fn echoing(mut self, key: &str) -> Self {
        const MARK: &str = "{ECHO_KEY}";
        for part in &mut self.parts {
            let text = String::from_utf8_lossy(part);
            if text.contains(MARK) {
                *part = text.replace(MARK, key).into_bytes();
            }
        }
        self
    }

    /// No answer at all: the server reads the request and closes.
    pub(crate) fn hang_up(mut self) -> Self {
        self.hang_up = true;
        self
    }

    /// Adds a header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the server received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lower-cased.
    pub(crate) headers: HashMap<String, String>,
    pub(crate) body: Value,
}

/// The running server; it stops when dropped.
pub(crate) struct TestServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Starts a server answering connections with `replies` in order (then
    /// 500s).
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(serve_in_order(listener, replies.into(), recorded));
        TestServer {
            addr,
            requests,
            task,
        }
    }

    /// A server whose first connection answers `first` and stays open
    /// (keep-alive), then takes the next request on it and closes without
    /// a word: a pooled connection the server dropped while it sat idle.
    /// Later connections get `rest` in order (then 500s).
    pub(crate) async fn start_stale_keep_alive(first: Reply, rest: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            if let Ok((mut socket, _)) = listener.accept().await {
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    if respond(&mut socket, first, &recorded, false).await.is_ok()
                        && let Ok(request) = read_request(&mut socket).await
                    {
                        recorded.lock().unwrap().push(request);
                    }
                });
            }
            serve_in_order(listener, rest.into(), recorded).await;
        });
        TestServer {
            addr,
            requests,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A URL on 127.0.0.1 where nothing listens (connections are refused).
pub(crate) async fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// Answers each connection `listener` accepts with the next of `replies`
/// (then 500s), until the listener fails.
async fn serve_in_order(
    listener: TcpListener,
    mut replies: VecDeque<Reply>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) {
    while let Ok((socket, _)) = listener.accept().await {
        let reply = replies
            .pop_front()
            .unwrap_or_else(|| Reply::body(500, "no reply scripted"));
        let recorded = recorded.clone();
        tokio::spawn(async move {
            let _ = serve(socket, reply, recorded).await;
        });
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> std::io::Result<()> {
    respond(&mut socket, reply, &recorded, true).await?;
    socket.shutdown().await
}

/// Reads one request, records it and writes `reply`; `close` says
/// `Connection: close`, otherwise the connection may be kept alive (the
/// reply then needs its Content-Length).
async fn respond(
    socket: &mut TcpStream,
    reply: Reply,
    recorded: &Arc<Mutex<Vec<Recorded>>>,
    close: bool,
) -> std::io::Result<()> {
    let request = read_request(socket).await?;
    // An echoing provider: `{ECHO_KEY}` in a reply stands for the key the
    // request carried (bearer token or `x-api-key`).
    let key = request
        .headers
        .get("authorization")
        .map(|v| v.trim_start_matches("Bearer ").to_string())
        .or_else(|| request.headers.get("x-api-key").cloned())
        .unwrap_or_default();
    recorded.lock().unwrap().push(request);
    if reply.hang_up {
        return Ok(());
    }
    let reply = reply.echoing(&key);

    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    if close {
        head.push_str("Connection: close\r\n");
    }
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if reply.content_length {
        let len: usize = reply.parts.iter().map(Vec::len).sum();
        head.push_str(&format!("Content-Length: {len}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;
    for (i, part) in reply.parts.iter().enumerate() {
        if let (Some(pause), true) = (reply.interval, i > 0) {
            tokio::time::sleep(pause).await;
        }
        socket.write_all(part).await?;
        socket.flush().await?;
        // Let the client see each part as its own read.
        tokio::task::yield_now().await;
    }
    Ok(())
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let header_end = loop {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let path = first.next().unwrap_or_default().to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + len {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[header_end..]).unwrap_or(Value::Null);
    Ok(Recorded {
        method,
        path,
        headers,
        body,
    })
}
