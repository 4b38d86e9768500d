//! The console in-process over HTTP (reqwest): every page on the demo
//! fleet, the filters, escaping of hostile values, the CSRF and token
//! guards, and each action; then in headless Chromium (chromedriver over
//! its WebDriver HTTP API): a parked run answered from its page, seen to
//! complete.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/console/demo.rs"]
#[allow(dead_code)]
mod demo;

use aegis::console::{Console, ConsoleError, ConsoleServer};
use aegis::graph::{EngineLimits, NodeSpec};
use aegis::prelude::*;
use aegis::worker::{
    Client, InMemoryRunQueue, Release, RunFault, RunQueue, RunState, WorkerConfig, WorkerInfo,
    WorkerPool,
};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A demo fleet in its own file, a console over it, and the file removed
/// on drop.
struct Setup {
    fleet: Option<demo::Fleet>,
    server: Option<ConsoleServer>,
    base: String,
    path: PathBuf,
}

impl Setup {
    async fn new(name: &str) -> Setup {
        let path = std::env::temp_dir().join(format!(
            "aegis-console-test-{name}-{}.sqlite",
            std::process::id()
        ));
        remove(&path);
        let fleet = demo::build(&path).await.expect("the demo fleet builds");
        let server = Console::new(fleet.queue.clone())
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .expect("binds loopback");
        let base = format!("http://{}", server.local_addr());
        Setup {
            fleet: Some(fleet),
            server: Some(server),
            base,
            path,
        }
    }

    fn client(&self) -> &Client {
        &self.fleet.as_ref().unwrap().client
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = http()
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The page's form token.
    async fn csrf(&self) -> String {
        let (_, page) = self.get("/run?id=review-1").await;
        csrf_in(&page)
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        http()
            .post(format!("{}{path}", self.base))
            .form(form)
            .send()
            .await
            .unwrap()
    }

    async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await.unwrap();
        }
        if let Some(fleet) = self.fleet.take() {
            fleet.stop().await.unwrap();
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

fn remove(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut f = path.to_path_buf().into_os_string();
        f.push(suffix);
        let _ = std::fs::remove_file(f);
    }
}

/// A client that shows redirects instead of following them.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn csrf_in(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a token")
        + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_string()
}

/// The thread ids a runs page lists, in order.
fn listed(page: &str) -> Vec<String> {
    page.split("<a href=\"/run?id=")
        .skip(1)
        .filter_map(|s| s.split_once("\">").map(|(_, rest)| rest))
        .filter_map(|s| s.split_once("</a>").map(|(id, _)| id.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_the_demo_fleet() {
    let s = Setup::new("pages").await;
    let (status, runs) = s.get("/").await;
    assert_eq!(status, 200);
    let mut ids = listed(&runs);
    ids.sort();
    assert_eq!(
        ids,
        [
            "etl-1", "etl-2", "etl-3", "intake-7", "intake-8", "ledger-1", "review-1", "review-2"
        ]
    );
    // Why each run stands where it stands.
    assert!(runs.contains("parley at <code>approval</code>: Publish this draft?"));
    assert!(runs.contains("quarantined: the parley answer delivered to the thread is unreadable"));
    assert!(runs.contains("which no live worker runs"));
    assert!(runs.contains("cannot: graph mismatch"));
    assert!(runs.contains("table `orders_2026` does not exist"));
    // intake-8's latest waypoint does not decode: its age is unknown, not
    // "never ran".
    assert!(runs.contains("<td><span class=\"err\">unreadable</span></td>"));

    let (status, run) = s.get("/run?id=etl-1").await;
    assert_eq!(status, 200);
    assert!(run.contains("<span class=\"s s-completed\">completed</span>"));
    // A timed-out attempt, then a fallback chain that failed as a whole
    // once, each retried.
    assert!(run.contains("run timeout elapsed"), "{run}");
    assert!(run.contains("llm: all 2 providers failed; last: anthropic-backup: HTTP 502"));
    // The hops, from the records alone: the one inside the failed call on
    // its row, and the one before the answer on the success's.
    assert!(
        run.contains(
            "<br>fallback hop from <code>openai-primary</code> to <code>anthropic-backup</code>: \
             ProviderError: "
        ),
        "{run}"
    );
    assert!(
        run.contains(
            "served by <code>anthropic-backup</code> (chain position 1) after hop from \
             <code>openai-primary</code>: ProviderError: "
        ),
        "{run}"
    );
    // The attempt table redacts the credential the provider echoed.
    assert!(run.contains("[REDACTED]"));
    assert!(!run.contains("sk-demo-"), "a secret reached the page");
    // The timeline in a frame sized to its three lanes.
    assert!(run.contains(
        "<iframe title=\"timeline\" sandbox style=\"height:330px\" src=\"/run/timeline?id=etl-1\">"
    ));
    assert!(run.contains("<h2>Waypoints</h2>"));
    assert!(
        run.contains("<td>demo-v1</td><td>completed</td>"),
        "claims table"
    );

    let (_, cached) = s.get("/run?id=etl-3").await;
    assert!(cached.contains("cache hit"));
    assert!(
        cached.contains(
            "served from the cache: produced by summarize attempt 2 via anthropic-backup"
        )
    );

    // A run whose waypoints do not read still has its page, saying so.
    let (status, broken) = s.get("/run?id=intake-8").await;
    assert_eq!(status, 200);
    assert!(broken.contains("quarantined: the thread&#39;s waypoints are unreadable"));
    assert!(broken.contains("The thread's waypoints cannot be read"));
    assert!(!broken.contains("the run has not started"));
    assert!(broken.contains("id=\"release\">Release (requeue)</button>"));

    let (status, timeline) = s.get("/run/timeline?id=etl-1").await;
    assert_eq!(status, 200);
    assert!(timeline.starts_with("<!DOCTYPE html>") && timeline.contains("<svg"));
    assert!(!timeline.contains("sk-demo-"));

    let (status, pinned) = s.get("/pinned").await;
    assert_eq!(status, 200);
    assert!(pinned.contains("<h2>Stranded runs</h2>"));
    assert!(listed(&pinned).contains(&"ledger-1".to_string()));
    assert!(pinned.contains("1: no live worker runs this fingerprint"));

    let (status, providers) = s.get("/providers").await;
    assert_eq!(status, 200);
    assert!(
        providers.contains(
            "<td class=\"nw\"><b>anthropic-backup</b></td><td>1</td><td>1</td><td>1</td>"
        )
    );
    // Hops away from the primary and onto the backup, counted from the
    // records (the one inside the call that succeeded included).
    assert!(providers.contains("<td>0 / 2</td>"), "{providers}");
    assert!(providers.contains("<td>2 / 0</td>"), "{providers}");
    assert!(providers.contains("Circuit-breaker state is not recorded in the fleet"));
    assert!(!providers.contains("sk-demo-"));

    let (status, _) = s.get("/run?id=nobody").await;
    assert_eq!(status, 404);
    let (status, _) = s.get("/no/such/page").await;
    assert_eq!(status, 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_narrow_the_runs_list() {
    let s = Setup::new("filters").await;
    let sorted = |page: String| {
        let mut ids = listed(&page);
        ids.sort();
        ids
    };
    assert_eq!(
        sorted(s.get("/?state=completed").await.1),
        ["etl-1", "etl-3", "review-2"]
    );
    assert_eq!(
        sorted(s.get("/?graph=pipeline&state=").await.1),
        ["etl-1", "etl-2", "etl-3"]
    );
    assert_eq!(
        sorted(s.get("/?state=awaiting_input&graph=review").await.1),
        ["review-1"]
    );
    assert_eq!(
        sorted(s.get("/?state=quarantined").await.1),
        ["intake-7", "intake-8"]
    );
    // Every run wrote its last waypoint seconds ago; `intake-8`'s does not
    // read, so it has no age to filter on.
    assert_eq!(s.get("/?age=lt1h").await.1.matches("/run?id=").count(), 7);
    assert!(listed(&s.get("/?age=gt1h").await.1).is_empty());
    // The form shows the filters it applied.
    let (_, page) = s.get("/?state=failed&age=lt5m").await;
    assert!(page.contains("<option value=\"failed\" selected>"));
    assert!(page.contains("<option value=\"lt5m\" selected>"));
    // A console that lists fewer runs shows the latest submitted.
    let short = Console::new(s.fleet.as_ref().unwrap().queue.clone())
        .with_max_runs(2)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let page = http()
        .get(format!("http://{}/", short.local_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(listed(&page), ["etl-2", "etl-3"]);
    short.shutdown().await.unwrap();
    assert_eq!(s.get("/?state=bogus").await.0, 400);
    assert_eq!(s.get("/?age=forever").await.0, 400);
    s.stop().await;
}

/// A graph whose node name and error are markup, run on a thread whose id
/// is too.
fn hostile_graph() -> WarGraph {
    let mut g = WarGraph::new(BattlefieldSchema::new(vec![]), EngineLimits::default());
    let node = "<img src=x onerror=alert('node')>";
    g.add_node(
        node,
        NodeSpec::from_fn("hostile", |_, _| {
            Box::pin(async {
                Err(StateNodeError::permanent(
                    "<script>alert(\"error\")</script> & token=sk-live-0123456789abcdef",
                ))
            })
        }),
    )
    .add_edge(START, node)
    .add_edge(node, END);
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_thread_ids_node_names_and_errors_are_escaped() {
    let s = Setup::new("hostile").await;
    let queue = s.fleet.as_ref().unwrap().queue.clone();
    let stop = CancellationToken::new();
    let pool = WorkerPool::new(queue, WarEngine::new)
        .with_config(
            WorkerConfig::default()
                .with_worker_id("<b>worker</b>")
                .with_poll_interval(Duration::from_millis(50)),
        )
        .register("<i>graph</i>", hostile_graph())
        .unwrap();
    let worker = tokio::spawn(pool.run(stop.clone()));
    let thread = "<svg/onload=alert(1) \"quoted\" 'single' &amp;";
    s.client()
        .submit("<i>graph</i>", thread, json!({}))
        .await
        .unwrap();
    let status = s
        .client()
        .wait(thread, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(status.state, RunState::Failed);

    let link = "/run?id=%3Csvg%2Fonload%3Dalert%281%29%20%22quoted%22%20%27single%27%20%26amp%3B";
    let (_, list) = s.get("/").await;
    assert!(list.contains(&format!("<a href=\"{link}\">")), "{list}");
    let (status, run) = s.get(link).await;
    assert_eq!(status, 200);
    for page in [&list, &run] {
        for raw in [
            "<svg",
            "<img",
            "<script",
            "<b>worker",
            "<i>graph",
            "sk-live-0123456789abcdef",
        ] {
            assert!(!page.contains(raw), "`{raw}` reached the page unescaped");
        }
    }
    assert!(run.contains("&lt;svg/onload=alert(1) &quot;quoted&quot; &#39;single&#39; &amp;amp;"));
    assert!(run.contains("&lt;img src=x onerror=alert(&#39;node&#39;)&gt;"));
    assert!(run.contains("&lt;script&gt;alert(&quot;error&quot;)&lt;/script&gt; &amp;"));
    assert!(run.contains("&lt;b&gt;worker&lt;/b&gt;"));
    stop.cancel();
    worker.await.unwrap().unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_need_the_console_token_and_origin_and_bounded_bodies() {
    let s = Setup::new("csrf").await;
    let csrf = s.csrf().await;
    // No token, a wrong one, another site's Origin: refused, nothing done.
    let r = s.post("/run/cancel", &[("thread", "review-1")]).await;
    assert_eq!(r.status().as_u16(), 422, "a form without its token");
    let r = s
        .post("/run/cancel", &[("thread", "review-1"), ("csrf", "0000")])
        .await;
    assert_eq!(r.status().as_u16(), 403);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("not issued by this console")
    );
    let r = http()
        .post(format!("{}/run/cancel", s.base))
        .header("Origin", "http://evil.example")
        .form(&[("thread", "review-1"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = http()
        .post(format!("{}/run/cancel", s.base))
        .header("Origin", "null")
        .form(&[("thread", "review-1"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    // Actions are POST only.
    assert_eq!(s.get("/run/cancel?thread=review-1").await.0, 405);
    // A body past the bound is refused before it is read whole.
    let huge = "x".repeat(aegis::console::MAX_BODY_BYTES + 1);
    let r = s
        .post(
            "/run/answer",
            &[
                ("thread", "review-1"),
                ("csrf", csrf.as_str()),
                ("answer", huge.as_str()),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 413);
    let state = s.client().status("review-1").await.unwrap().unwrap().state;
    assert_eq!(state, RunState::AwaitingInput, "nothing was done");
    // A rebinding DNS name for 127.0.0.1 is not this console's host.
    let r = http()
        .get(format!("{}/", s.base))
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 421);
    // The same form from this console's own page is accepted.
    let r = http()
        .post(format!("{}/run/cancel", s.base))
        .header("Origin", &s.base)
        .form(&[("thread", "review-1"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let state = s.client().status("review-1").await.unwrap().unwrap().state;
    assert_eq!(state, RunState::Cancelled);
    s.stop().await;
}

#[tokio::test]
async fn a_non_loopback_address_needs_a_token_and_then_every_request_does() {
    let queue = Arc::new(InMemoryRunQueue::new());
    let refused = Console::new(queue.clone())
        .bind("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ConsoleError::NonLoopbackWithoutToken { .. }),
        "{refused}"
    );
    assert!(matches!(
        Console::new(queue.clone())
            .with_token("")
            .bind("127.0.0.1:0".parse().unwrap())
            .await,
        Err(ConsoleError::EmptyToken)
    ));
    let console = Console::new(queue.clone()).with_token("s3cret-token");
    assert!(
        !format!("{console:?}").contains("s3cret"),
        "the token stays out of Debug"
    );
    let server = console.bind("0.0.0.0:0".parse().unwrap()).await.unwrap();
    let base = format!("http://127.0.0.1:{}", server.local_addr().port());
    let get = |auth: Option<&'static str>| {
        let mut r = http().get(format!("{base}/pinned"));
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        r.send()
    };
    assert_eq!(get(None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        get(Some("Bearer wrong")).await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        get(Some("Bearer s3cret-token"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    // A browser signs in once; the cookie carries the token after.
    let login = http().get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(login.status().as_u16(), 200);
    let csrf = csrf_in(&login.text().await.unwrap());
    let bad = http()
        .post(format!("{base}/login"))
        .form(&[("token", "wrong"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 401);
    assert!(bad.headers().get("set-cookie").is_none());
    let ok = http()
        .post(format!("{base}/login"))
        .form(&[("token", "s3cret-token"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 303);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let with_cookie = http()
        .get(format!("{base}/"))
        .header("Cookie", cookie.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status().as_u16(), 200);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_action_does_what_it_says() {
    let s = Setup::new("actions").await;
    let csrf = s.csrf().await;
    let act = |path: &'static str, thread: &'static str, answer: &'static str| {
        let csrf = csrf.clone();
        let base = s.base.clone();
        async move {
            http()
                .post(format!("{base}{path}"))
                .form(&[
                    ("thread", thread),
                    ("csrf", csrf.as_str()),
                    ("answer", answer),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    // Answer a parley: the live worker resumes and completes the run.
    let r = act("/run/answer", "review-1", "yes").await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/run?id=review-1&done=answer");
    let done = s
        .client()
        .wait("review-1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Completed);
    let state = s.client().latest("review-1").await.unwrap().unwrap().state;
    assert_eq!(state.get("status"), Some(&json!("published")));
    let (_, page) = s.get("/run?id=review-1&done=answer").await;
    assert!(page.contains("Answer delivered"));
    // Answering again is refused with the reason.
    let r = act("/run/answer", "review-1", "yes").await;
    assert_eq!(r.status().as_u16(), 409);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("is not awaiting input (it is completed)")
    );

    // Release a quarantined run: its unreadable answer is dropped and it
    // asks again; then a JSON answer routes it.
    let r = act("/run/requeue", "intake-7", "").await;
    assert_eq!(r.status().as_u16(), 303);
    let state = s.client().status("intake-7").await.unwrap().unwrap();
    assert_eq!((state.state, state.fault), (RunState::AwaitingInput, None));
    act("/run/answer", "intake-7", "{\"approved\": false}").await;
    s.client()
        .wait("intake-7", Duration::from_secs(30))
        .await
        .unwrap();
    let state = s.client().latest("intake-7").await.unwrap().unwrap().state;
    assert_eq!(state.get("status"), Some(&json!("shelved")));

    // Cancel the stranded run.
    let r = act("/run/cancel", "ledger-1", "").await;
    assert_eq!(r.status().as_u16(), 303);
    let state = s.client().status("ledger-1").await.unwrap().unwrap().state;
    assert_eq!(state, RunState::Cancelled);
    let r = act("/run/requeue", "nobody", "").await;
    assert_eq!(r.status().as_u16(), 409);
    s.stop().await;
}

#[tokio::test]
async fn retry_now_lets_the_next_claim_take_a_held_back_run() {
    let queue = Arc::new(InMemoryRunQueue::new());
    let client = Client::new(queue.clone());
    let worker = WorkerInfo::new("w", vec![aegis::worker::GraphKey::new("g", "fp")]);
    client.submit("g", "t1", json!({})).await.unwrap();
    let claim = queue
        .claim(&worker, 1, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    let fault = RunFault::UnreadableWaypoint {
        message: "bad row".into(),
    };
    queue
        .release(&claim.lease, Release::Poisoned(fault))
        .await
        .unwrap();
    assert!(
        queue
            .claim(&worker, 1, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    let server = Console::new(queue.clone())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let page = http()
        .get(format!("{base}/run?id=t1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("held back: the thread&#39;s waypoints are unreadable: bad row"));
    assert!(page.contains("id=\"retry\">Retry now</button>"));
    let r = http()
        .post(format!("{base}/run/retry"))
        .form(&[("thread", "t1"), ("csrf", csrf_in(&page).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let claims = queue
        .claim(&worker, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1, "claimed at once");
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------
// The browser: chromedriver over its WebDriver HTTP API.

/// Debian's chromedriver and Chromium, or where `AEGIS_CHROMEDRIVER` and
/// `AEGIS_CHROMIUM` say.
fn chromedriver() -> String {
    std::env::var("AEGIS_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".to_string())
}

fn chromium() -> String {
    std::env::var("AEGIS_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string())
}

/// A chromedriver process on a free port, killed on drop.
struct Driver {
    child: std::process::Child,
    base: String,
    session: Option<String>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Driver {
    async fn start() -> Driver {
        let port = free_port();
        let child = std::process::Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        let mut driver = Driver {
            child,
            base,
            session: None,
        };
        for _ in 0..100 {
            if let Ok(r) = http().get(format!("{}/status", driver.base)).send().await
                && r.status().is_success()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1360,1700"]
            }
        }}});
        let created = driver.call("POST", "/session", Some(caps)).await;
        driver.session = Some(
            created["sessionId"]
                .as_str()
                .unwrap_or_else(|| panic!("no session: {created}"))
                .to_string(),
        );
        driver
    }

    /// One WebDriver command; its `value`.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = match &self.session {
            Some(id) => format!("{}/session/{id}{path}", self.base),
            None => format!("{}{path}", self.base),
        };
        let request = match method {
            "GET" => http().get(url),
            "DELETE" => http().delete(url),
            _ => http()
                .post(url)
                .header("Content-Type", "application/json")
                .body(body.unwrap_or(json!({})).to_string()),
        };
        let text = request.send().await.unwrap().text().await.unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        v["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    async fn source(&self) -> String {
        self.call("GET", "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element `{css}`: {found}"))
            .to_string()
    }

    async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("AEGIS_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let b64 = self.call("GET", "/screenshot", None).await;
        let png = decode_base64(b64.as_str().unwrap_or_default());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(format!("{dir}/{name}.png"), png).unwrap();
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter_map(value) {
        acc = (acc << 6) | c;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).unwrap());
        }
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(decode_base64("aGVsbG8sIHdvcmxk"), b"hello, world");
    assert_eq!(decode_base64("YQ=="), b"a");
}

/// Whether to run the browser test: chromedriver is there, or the run
/// said to skip it (`AEGIS_SKIP_BROWSER=1`); otherwise the test fails
/// saying what to install.
fn browser_available() -> bool {
    let (driver, browser) = (chromedriver(), chromium());
    if std::path::Path::new(&driver).exists() && std::path::Path::new(&browser).exists() {
        return true;
    }
    if std::env::var("AEGIS_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("skipped the browser test: no {driver} / {browser}, and AEGIS_SKIP_BROWSER=1");
        return false;
    }
    panic!(
        "the browser test needs headless Chromium and chromedriver ({browser}, {driver}): \
         `apt-get install chromium chromium-driver`, or set AEGIS_SKIP_BROWSER=1 to skip it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_is_answered_from_its_page_in_a_real_browser() {
    if !browser_available() {
        return;
    }
    // The whole browser session is bounded: a hung driver fails the test.
    tokio::time::timeout(Duration::from_secs(120), async {
        let s = Setup::new("browser").await;
        let driver = Driver::start().await;
        let base = s.base.clone();
        driver.open(&format!("{base}/")).await;
        assert!(driver.source().await.contains("review-1"));
        driver.screenshot("runs").await;
        driver.open(&format!("{base}/pinned")).await;
        driver.screenshot("pinned").await;
        driver.open(&format!("{base}/providers")).await;
        driver.screenshot("providers").await;
        driver.open(&format!("{base}/run?id=etl-1")).await;
        driver.screenshot("run-completed").await;
        driver.open(&format!("{base}/run?id=etl-3")).await;
        driver.screenshot("run-cached").await;
        driver.open(&format!("{base}/run?id=intake-7")).await;
        driver.screenshot("run-quarantined").await;
        driver.open(&format!("{base}/run?id=intake-8")).await;
        driver.screenshot("run-unreadable").await;

        // The parked run: type the answer into its form and send it.
        driver.open(&format!("{base}/run?id=review-1")).await;
        assert!(driver.source().await.contains("Publish this draft?"));
        driver.screenshot("run-parked").await;
        let field = driver.find("#answer").await;
        driver
            .call(
                "POST",
                &format!("/element/{field}/value"),
                Some(json!({"text": "yes"})),
            )
            .await;
        let send = driver.find("#send-answer").await;
        driver
            .call("POST", &format!("/element/{send}/click"), None)
            .await;
        // The browser posts the form (its Origin and the form token pass
        // the guard) and follows the redirect back to the run's page.
        let mut landed = String::new();
        for _ in 0..100 {
            landed = driver
                .call("GET", "/url", None)
                .await
                .as_str()
                .unwrap_or_default()
                .to_string();
            if landed.ends_with("/run?id=review-1&done=answer") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            landed.ends_with("&done=answer"),
            "the browser is at {landed}"
        );
        assert!(driver.source().await.contains("Answer delivered"));
        driver.screenshot("run-answer-sent").await;
        // Poll the page until the run shows completed.
        let mut page = String::new();
        for _ in 0..100 {
            driver.open(&format!("{base}/run?id=review-1")).await;
            page = driver.source().await;
            if page.contains("<span class=\"s s-completed\">completed</span>") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            page.contains("<span class=\"s s-completed\">completed</span>"),
            "the run did not complete: {page}"
        );
        driver.screenshot("run-answered").await;
        let state = s.client().latest("review-1").await.unwrap().unwrap().state;
        assert_eq!(state.get("status"), Some(&json!("published")));
        driver.call("DELETE", "", None).await;
        s.stop().await;
    })
    .await
    .expect("the browser test finished within its bound");
}

/// The console over a PostgreSQL queue (what `console postgres://...`
/// serves): a run no live worker takes is listed with its reason.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_console_reads_a_postgres_queue() {
    use aegis::waypoint::PostgresOptions;
    use aegis::worker::PostgresRunQueue;

    let url = std::env::var("AEGIS_PG_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".to_string());
    let schema = format!("aegis_console_{}", std::process::id());
    let queue = Arc::new(
        PostgresRunQueue::connect_with(
            &url,
            PostgresOptions::default()
                .with_schema(&schema)
                .with_pool_size(2),
        )
        .await
        .expect("the test PostgreSQL server answers"),
    );
    queue
        .submit("triage", "ticket-42", json!({}))
        .await
        .unwrap();
    let server = Console::new(queue.clone())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let page = http()
        .get(format!("{base}/?state=queued"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.shutdown().await.unwrap();
    drop(queue);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
    assert_eq!(listed(&page), ["ticket-42"]);
    assert!(
        page.contains("no live worker runs graph `triage`"),
        "{page}"
    );
}
