//! A local payment server on 127.0.0.1 and a client for it, shared by
//! `tests/effects_fleet.rs` and `examples/payments.rs`.
//!
//! `POST /charge` (body `{"thread": .., "effect": ..}`, header
//! `Idempotency-Key`) makes a charge and answers `{"charge": id}`. A server
//! that honours the key answers a repeated key with the first charge and
//! charges nothing; one that does not charges every time. Either remembers
//! the last charge per key for `GET /charges/<key>` (200 with the charge,
//! or 404), which a reconcile function asks. The server can be told to wait
//! before it answers (a window in which its caller can be killed after the
//! charge and before it records it) or to never answer a thread's first
//! charge.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use aegis::graph::{EffectKey, EngineLimits, NodeSpec, OnUnknown};
use aegis::policy::RetryPredicate;
use aegis::prelude::*;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The longest request head or body read.
const MAX_REQUEST: usize = 16 * 1024;

#[derive(Default)]
pub struct Ledger {
    /// Charges made, per (thread, effect).
    pub charges: HashMap<(String, String), u32>,
    /// The last charge per idempotency key.
    pub by_key: HashMap<String, String>,
    /// Lookups that found a charge (reconciled unknown outcomes).
    pub lookups_found: u32,
    /// Lookups that found none.
    pub lookups_missing: u32,
    next: u64,
}

/// How the server behaves.
#[derive(Clone)]
pub struct Behaviour {
    pub honours_keys: bool,
    /// The pause before each answer to a charge.
    pub delay: Duration,
    /// Threads with this prefix never get an answer to their first charge.
    pub hang_prefix: Option<String>,
    /// Every `n`th charge is reported on `charged` and answered only after
    /// `report_delay` (time for the caller to be killed).
    pub report_every: Option<u32>,
    pub report_delay: Duration,
}

pub struct PaymentServer {
    pub addr: SocketAddr,
    pub ledger: Arc<Mutex<Ledger>>,
}

impl PaymentServer {
    /// Starts a server; charges it reports go to the returned receiver (as
    /// `(thread, effect)`).
    pub async fn start(
        behaviour: Behaviour,
    ) -> (PaymentServer, mpsc::UnboundedReceiver<(String, String)>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = ledger.clone();
        let hung = Arc::new(Mutex::new(HashSet::new()));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (ledger, behaviour, tx, hung) =
                    (shared.clone(), behaviour.clone(), tx.clone(), hung.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, &ledger, &behaviour, &tx, &hung).await;
                });
            }
        });
        (PaymentServer { addr, ledger }, rx)
    }

    /// Charges made for (thread, effect).
    pub fn charges(&self, thread: &str, effect: &str) -> u32 {
        let ledger = self.ledger.lock().unwrap();
        ledger
            .charges
            .get(&(thread.to_string(), effect.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

async fn serve(
    mut stream: TcpStream,
    ledger: &Mutex<Ledger>,
    behaviour: &Behaviour,
    charged: &mpsc::UnboundedSender<(String, String)>,
    hung: &Mutex<HashSet<String>>,
) -> std::io::Result<()> {
    let Some((method, path, headers, body)) = read_request(&mut stream).await? else {
        return Ok(());
    };
    let (status, answer, pause) = if method == "POST" && path == "/charge" {
        let key = headers.get("idempotency-key").cloned().unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let thread = body["thread"].as_str().unwrap_or("?").to_string();
        let effect = body["effect"].as_str().unwrap_or("?").to_string();
        let mut l = ledger.lock().unwrap();
        let existing = l.by_key.get(&key).cloned();
        let (charge, fresh) = match existing {
            Some(c) if behaviour.honours_keys && !key.is_empty() => (c, false),
            _ => {
                l.next += 1;
                let c = format!("ch_{}", l.next);
                *l.charges
                    .entry((thread.clone(), effect.clone()))
                    .or_insert(0) += 1;
                l.by_key.insert(key.clone(), c.clone());
                (c, true)
            }
        };
        let n = l.next;
        drop(l);
        let mut pause = behaviour.delay;
        if fresh {
            if let Some(prefix) = &behaviour.hang_prefix
                && thread.starts_with(prefix.as_str())
                && hung.lock().unwrap().insert(thread.clone())
            {
                let _ = charged.send((thread.clone(), effect.clone()));
                pause = Duration::from_secs(3600);
            } else if behaviour
                .report_every
                .is_some_and(|every| n.is_multiple_of(u64::from(every)))
            {
                let _ = charged.send((thread, effect));
                pause = behaviour.report_delay;
            }
        }
        (200, json!({ "charge": charge }), pause)
    } else if method == "GET" && path.starts_with("/charges/") {
        let key = &path["/charges/".len()..];
        let mut l = ledger.lock().unwrap();
        match l.by_key.get(key).cloned() {
            Some(c) => {
                l.lookups_found += 1;
                (200, json!({ "charge": c }), Duration::ZERO)
            }
            None => {
                l.lookups_missing += 1;
                (404, json!({ "error": "no such charge" }), Duration::ZERO)
            }
        }
    } else {
        (404, json!({ "error": "not found" }), Duration::ZERO)
    };
    tokio::time::sleep(pause).await;
    let body = answer.to_string();
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

type Request = (String, String, HashMap<String, String>, Vec<u8>);

/// One request: method, path, headers (lower-case names), body.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok(Some((method, path, headers, body)))
}

/// One request to the server at `addr`: its status and JSON body, or an
/// error after `timeout`.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let key = key
            .map(|k| format!("Idempotency-Key: {k}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{key}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 2048];
        loop {
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 || reply.len() > MAX_REQUEST {
                break;
            }
            reply.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&reply).to_string();
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {text:?}"))?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let value = serde_json::from_str(body).map_err(|e| e.to_string())?;
        Ok((status, value))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

/// Charges for (thread, effect) with `key` sent as `Idempotency-Key`.
pub async fn charge(
    addr: SocketAddr,
    key: &str,
    thread: &str,
    effect: &str,
    timeout: Duration,
) -> Result<Value, String> {
    let body = json!({ "thread": thread, "effect": effect });
    match call(addr, "POST", "/charge", Some(key), Some(&body), timeout).await? {
        (200, v) => Ok(v),
        (status, v) => Err(format!("charge refused ({status}): {v}")),
    }
}

/// Asks whether a charge with `key` was made: `Some(charge)` or `None`.
pub async fn lookup(
    addr: SocketAddr,
    key: &str,
    timeout: Duration,
) -> Result<Option<Value>, String> {
    match call(addr, "GET", &format!("/charges/{key}"), None, None, timeout).await? {
        (200, v) => Ok(Some(v)),
        (404, _) => Ok(None),
        (status, v) => Err(format!("lookup failed ({status}): {v}")),
    }
}

/// How long a node waits for the payment server.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn field(name: &str) -> FieldSpec {
    FieldSpec::new(
        FieldName::new(name).unwrap(),
        DispatchRule::LastWrite,
        None,
        false,
    )
}

fn retried() -> Aegis {
    Aegis::new().with_retry(
        RetryPolicy::default()
            .with_max_attempts(6)
            .with_initial_interval(Duration::from_millis(5))
            .with_backoff_factor(1.0)
            .with_max_interval(Duration::from_millis(5))
            .with_jitter(false)
            .with_retry_on(RetryPredicate::TransientOnly),
    )
}

/// The payment run: `honoured` charges at the server honouring keys
/// (effect `charge_a`, retried with the same key after an unknown
/// outcome), then `reconciled` charges at the one that does not (effect
/// `charge_b`, reconciled by looking the key up). Each node works a
/// random part of `work` first, so kills land anywhere.
pub fn pay_graph(honouring: SocketAddr, plain: SocketAddr, work: Duration) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![field("a"), field("b")]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    let pause = move || {
        let ms = u64::try_from(work.as_millis()).unwrap_or(0);
        Duration::from_millis(rand::random_range(0..=ms))
    };
    g.add_node(
        "honoured",
        NodeSpec::from_fn("honoured", move |_, ctx| {
            Box::pin(async move {
                tokio::time::sleep(pause()).await;
                let thread = ctx.thread_id().to_string();
                let receipt: Value = ctx
                    .effect("charge_a")
                    .on_unknown(OnUnknown::RetrySameKey)
                    .run(|key: EffectKey| async move {
                        charge(honouring, key.as_str(), &thread, "charge_a", CALL_TIMEOUT).await
                    })
                    .await?;
                let mut d = StateDelta::new();
                d.set("a", receipt)?;
                Ok(d.into())
            })
        }),
    )
    .add_node(
        "reconciled",
        NodeSpec::from_fn("reconciled", move |_, ctx| {
            Box::pin(async move {
                tokio::time::sleep(pause()).await;
                let thread = ctx.thread_id().to_string();
                let receipt: Value = ctx
                    .effect("charge_b")
                    .reconcile(move |key: EffectKey| async move {
                        lookup(plain, key.as_str(), CALL_TIMEOUT).await
                    })
                    .run(|key: EffectKey| async move {
                        charge(plain, key.as_str(), &thread, "charge_b", CALL_TIMEOUT).await
                    })
                    .await?;
                let mut d = StateDelta::new();
                d.set("b", receipt)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "honoured")
    .add_edge("honoured", "reconciled")
    .add_edge("reconciled", END);
    g.set_aegis("honoured", retried());
    g.set_aegis("reconciled", retried());
    g
}

/// One node `asked` charging at the server that does not honour keys
/// (effect `charge_h`) and asking a human about an unknown outcome.
pub fn ask_graph(plain: SocketAddr) -> WarGraph {
    let schema = BattlefieldSchema::new(vec![field("h")]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "asked",
        NodeSpec::from_fn("asked", move |_, ctx| {
            Box::pin(async move {
                let thread = ctx.thread_id().to_string();
                let receipt: Value = ctx
                    .effect("charge_h")
                    .on_unknown(OnUnknown::AskHuman)
                    .run(|key: EffectKey| async move {
                        charge(plain, key.as_str(), &thread, "charge_h", CALL_TIMEOUT).await
                    })
                    .await?;
                let mut d = StateDelta::new();
                d.set("h", receipt)?;
                Ok(d.into())
            })
        }),
    )
    .add_edge(START, "asked")
    .add_edge("asked", END);
    g.set_aegis("asked", retried());
    g
}
