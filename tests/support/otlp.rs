//! A small OTLP/HTTP collector on 127.0.0.1 for the trace tests, on a
//! thread of its own (an exporter's flush blocks, so the collector must
//! not share the test's runtime): it decodes each `POST /v1/traces` body as
//! the real `ExportTraceServiceRequest` protobuf and keeps its spans. A
//! silent collector accepts connections and never answers.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// The collector's received spans, in arrival order.
#[derive(Clone, Default)]
pub(crate) struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    requests: Arc<Mutex<usize>>,
    addr: Option<SocketAddr>,
}

impl Collector {
    /// A collector answering 200 to every export.
    pub(crate) fn start() -> Self {
        Self::listen(true)
    }

    /// A collector that accepts connections and never reads or answers.
    pub(crate) fn silent() -> Self {
        Self::listen(false)
    }

    fn listen(answers: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let collector = Collector {
            addr: Some(listener.local_addr().unwrap()),
            ..Collector::default()
        };
        let shared = collector.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if answers {
                    let shared = shared.clone();
                    std::thread::spawn(move || shared.serve(stream));
                } else {
                    held.push(stream);
                }
            }
        });
        collector
    }

    /// The base URL to export to.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr.unwrap())
    }

    /// Every span received so far.
    pub(crate) fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// How many export requests arrived.
    pub(crate) fn requests(&self) -> usize {
        *self.requests.lock().unwrap()
    }

    /// Answers the requests of one keep-alive connection.
    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let path_ok = line.starts_with("POST /v1/traces ");
            let mut length = 0usize;
            let mut protobuf = false;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 {
                    return;
                }
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap_or((header, ""));
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "content-length" {
                    length = value.parse().unwrap();
                }
                if name == "content-type" {
                    protobuf = value == "application/x-protobuf";
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).unwrap();
            assert!(path_ok && protobuf, "an OTLP/HTTP protobuf export: {line}");
            let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            {
                let mut spans = self.spans.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        spans.extend(scope.spans);
                    }
                }
                *self.requests.lock().unwrap() += 1;
            }
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}
