//! The demo fleet the console example serves (and tests/console.rs
//! drives): an embedded SQLite queue whose runs really ran through worker
//! pools, one of each kind an operator meets.
//!
//! - `review-1`: waits on a parley ("Publish this draft?");
//! - `review-2`: asked, answered, completed;
//! - `etl-1`: completed after a timed-out attempt and an LLM call whose
//!   fallback chain failed once (503 then 502) and then answered from its
//!   second provider;
//! - `etl-3`: the same rows, its summary served from the node cache;
//! - `etl-2`: failed (a permanent error);
//! - `ledger-1`: parked on graph `ledger` v1, then v1's workers were
//!   retired: pinned to a fingerprint no live worker runs, judged
//!   incompatible by v2;
//! - `intake-7`: its stored parley answer became unreadable; three claims
//!   in a row found it so and it was quarantined;
//! - `intake-8`: quarantined the same way for a waypoint that no longer
//!   decodes.

use aegis::error::LlmError;
use aegis::graph::{EngineLimits, InputMapping, NodeSpec, ParleyResponse};
use aegis::llm::{FallbackLlmAdapter, LlmPort, MockLlmAdapter};
use aegis::paladin::Paladin;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use aegis::state::FieldName;
use aegis::worker::{Client, RunState, SqliteRunQueue, WorkerConfig, WorkerError, WorkerPool};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// How long the demo waits for any one run to get where it should.
const WAIT: Duration = Duration::from_secs(30);

fn field(name: &str) -> Result<FieldSpec, DemoError> {
    Ok(FieldSpec::new(
        FieldName::new(name)?,
        DispatchRule::LastWrite,
        None,
        false,
    ))
}

fn set(name: &'static str, field: &'static str, value: &'static str) -> NodeSpec {
    NodeSpec::from_fn(name, move |_, _| {
        Box::pin(async move {
            let mut delta = StateDelta::new();
            delta.set(field, value)?;
            Ok(delta.into())
        })
    })
}

/// draft → approval (a parley gate) → publish | shelve.
pub(crate) fn review() -> Result<WarGraph, DemoError> {
    let schema = BattlefieldSchema::new(vec![field("draft")?, field("status")?]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node("draft", set("draft", "draft", "release notes for 7.0"))
        .add_node(
            "approval",
            NodeSpec::gate("Publish this draft?", "publish", "shelve"),
        )
        .add_node("publish", set("publish", "status", "published"))
        .add_node("shelve", set("shelve", "status", "shelved"))
        .add_edge(START, "draft")
        .add_edge("draft", "approval")
        .add_edge("publish", END)
        .add_edge("shelve", END);
    Ok(g)
}

/// fetch (fails permanently when the input says `fail`) → enrich (its
/// first attempt overruns a 100 ms timeout when the input says `slow`) →
/// summarize (an LLM call through a two-provider fallback chain, retried on
/// transient errors, its answer cached).
fn pipeline() -> Result<WarGraph, DemoError> {
    let flag = |name: &str| -> Result<FieldSpec, DemoError> {
        Ok(FieldSpec::new(
            FieldName::new(name)?,
            DispatchRule::LastWrite,
            Some(json!(false)),
            false,
        ))
    };
    let schema = BattlefieldSchema::new(vec![
        flag("fail")?,
        flag("slow")?,
        field("rows")?,
        field("summary")?,
    ]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node(
        "fetch",
        NodeSpec::from_fn("fetch", |state, _| {
            let fail = state.get("fail").and_then(|v| v.as_bool()).unwrap_or(false);
            Box::pin(async move {
                if fail {
                    return Err(StateNodeError::permanent(
                        "warehouse refused the export: table `orders_2026` does not exist",
                    ));
                }
                let mut delta = StateDelta::new();
                delta.set("rows", "1204 orders")?;
                Ok(delta.into())
            })
        }),
    )
    .add_node(
        "enrich",
        NodeSpec::from_fn("enrich", |state, ctx| {
            let stall =
                ctx.attempt() == 1 && state.get("slow").and_then(|v| v.as_bool()).unwrap_or(false);
            Box::pin(async move {
                if stall {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                let mut delta = StateDelta::new();
                delta.set("rows", "1204 orders, 3 regions")?;
                Ok(delta.into())
            })
        }),
    )
    .add_node(
        "summarize",
        NodeSpec::paladin(
            Paladin::new("Summarizer").with_model("gpt-4o-mini"),
            InputMapping::new("Summarize {rows}"),
            FieldName::new("summary")?,
        ),
    )
    .add_edge(START, "fetch")
    .add_edge("fetch", "enrich")
    .add_edge("enrich", "summarize")
    .add_edge("summarize", END);
    let retry = RetryPolicy::default()
        .with_initial_interval(Duration::from_millis(20))
        .with_jitter(false);
    g.set_aegis(
        "enrich",
        Aegis::new()
            .with_retry(retry.clone())
            .with_timeout(TimeoutPolicy::run(Duration::from_millis(100))),
    );
    g.set_aegis(
        "summarize",
        Aegis::new().with_retry(retry).with_cache(
            CachePolicy::new(Duration::from_secs(3600), CacheKeySpec::Default)
                .with_cache_fallback_results(true),
        ),
    );
    Ok(g)
}

/// v1: open → approval (a parley gate) → post | void. v2 drops the gate:
/// a thread waiting at it cannot continue on v2.
fn ledger(version: u32) -> Result<WarGraph, DemoError> {
    let schema = BattlefieldSchema::new(vec![field("entry")?, field("status")?]);
    let mut g = WarGraph::new(schema, EngineLimits::default());
    g.add_node("open", set("open", "entry", "invoice 4411"))
        .add_node("post", set("post", "status", "posted"))
        .add_edge(START, "open")
        .add_edge("post", END);
    if version == 1 {
        g.add_node(
            "approval",
            NodeSpec::gate("Post the ledger entry?", "post", "void"),
        )
        .add_node("void", set("void", "status", "void"))
        .add_edge("open", "approval")
        .add_edge("void", END);
    } else {
        g.add_edge("open", "post");
    }
    Ok(g)
}

/// The chain the pipeline's LLM node calls: `openai-primary` is down
/// (503), and `anthropic-backup` fails once (502, its proxy echoing the
/// caller's credential in the error body), then answers.
fn chain() -> Result<Arc<dyn LlmPort>, DemoError> {
    let down = |provider: &str, status: u16, text: &str| LlmError::ProviderError {
        provider: provider.to_string(),
        status,
        message: text.to_string(),
        retry_after: None,
    };
    let primary = MockLlmAdapter::new()
        .with_provider_name("openai-primary")
        .with_error(down("openai-primary", 503, "upstream overloaded"))
        .with_error(down("openai-primary", 503, "upstream overloaded"));
    let backup = MockLlmAdapter::new()
        .with_provider_name("anthropic-backup")
        .with_error(down(
            "anthropic-backup",
            502,
            "bad gateway (the proxy echoed Authorization: Bearer sk-demo-4f9a8b7c6d5e4f3a2b1c)",
        ))
        .with_response("1204 orders in 3 regions, 3% up on last week");
    Ok(Arc::new(FallbackLlmAdapter::new(vec![
        Arc::new(primary),
        Arc::new(backup),
    ])?))
}

fn pool(
    queue: Arc<SqliteRunQueue>,
    id: &str,
    ledger_version: u32,
    llm: Arc<dyn LlmPort>,
) -> Result<WorkerPool, DemoError> {
    // One node cache for the fleet: a run's answer serves the next one.
    let cache = Arc::new(InMemoryNodeCache::new());
    Ok(WorkerPool::new(queue, move |store| {
        WarEngine::new(store)
            .with_llm(llm.clone())
            .with_node_cache(cache.clone())
    })
    .with_config(
        WorkerConfig::default()
            .with_worker_id(id)
            .with_max_runs(8)
            .with_lease_ttl(Duration::from_secs(5))
            .with_poll_interval(Duration::from_millis(50)),
    )
    .register("review", review()?)?
    .register("pipeline", pipeline()?)?
    .register("ledger", ledger(ledger_version)?)?)
}

/// The fleet: its queue, a client, and the live worker.
pub(crate) struct Fleet {
    pub(crate) queue: Arc<SqliteRunQueue>,
    /// A client of the queue (what the tests act through).
    #[allow(dead_code)]
    pub(crate) client: Client,
    stop: CancellationToken,
    worker: JoinHandle<Result<(), WorkerError>>,
}

impl Fleet {
    /// Stops the live worker (its runs halt and go back to the queue).
    pub(crate) async fn stop(self) -> Result<(), DemoError> {
        self.stop.cancel();
        self.worker.await??;
        Ok(())
    }
}

async fn wait_for(client: &Client, thread: &str, state: RunState) -> Result<(), DemoError> {
    let status = client
        .wait_until(thread, WAIT, |s| s == state || s.is_final())
        .await?;
    if status.state != state {
        return Err(format!("{thread}: expected {state}, found {}", status.state).into());
    }
    Ok(())
}

/// Builds the fleet in the SQLite file at `path` (created) and leaves
/// worker `demo-live` (graph `ledger` v2) running on it.
pub(crate) async fn build(path: &Path) -> Result<Fleet, DemoError> {
    let queue = Arc::new(SqliteRunQueue::open(path).await?);
    let client = Client::new(queue.clone());

    // The first version of the fleet.
    let stop_old = CancellationToken::new();
    let old = tokio::spawn(pool(queue.clone(), "demo-v1", 1, chain()?)?.run(stop_old.clone()));
    for (graph, thread, input) in [
        ("review", "review-1", json!({})),
        ("review", "review-2", json!({})),
        ("review", "intake-7", json!({})),
        ("review", "intake-8", json!({})),
        ("ledger", "ledger-1", json!({})),
    ] {
        client.submit(graph, thread, input).await?;
    }
    for thread in ["review-1", "review-2", "intake-7", "intake-8", "ledger-1"] {
        wait_for(&client, thread, RunState::AwaitingInput).await?;
    }
    // One at a time: the provider's script is consumed in call order.
    client
        .submit("pipeline", "etl-1", json!({"slow": true}))
        .await?;
    wait_for(&client, "etl-1", RunState::Completed).await?;
    // The same rows again: the summary comes from the cache.
    client.submit("pipeline", "etl-3", json!({})).await?;
    wait_for(&client, "etl-3", RunState::Completed).await?;
    client
        .submit("pipeline", "etl-2", json!({"fail": true}))
        .await?;
    wait_for(&client, "etl-2", RunState::Failed).await?;
    client
        .answer("review-2", ParleyResponse::new(json!("yes")))
        .await?;
    wait_for(&client, "review-2", RunState::Completed).await?;
    stop_old.cancel();
    old.await??;

    // A parley answer that no longer reads (a bad migration, a manual
    // edit): written straight into the row, as only a broken writer would.
    corrupt_answer(path, "intake-7")?;
    // A waypoint whose bytes no longer decode (a disk fault, a bad
    // restore), on a thread then answered.
    corrupt_latest_waypoint(path, "intake-8")?;
    client
        .answer("intake-8", ParleyResponse::new(json!("yes")))
        .await?;

    // The next version: `ledger` v2 cannot continue `ledger-1`.
    let stop = CancellationToken::new();
    let worker = tokio::spawn(pool(queue.clone(), "demo-live", 2, chain()?)?.run(stop.clone()));
    // Three claims in a row find the answer unreadable; `retry_now` skips
    // the backoffs between them (1 s, then 5 s).
    for thread in ["intake-7", "intake-8"] {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let state = client.status(thread).await?.map(|s| s.state);
            if state == Some(RunState::Quarantined) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("{thread} was not quarantined (it is {state:?})").into());
            }
            client.retry_now(thread).await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // `ledger-1` is judged by v2 (incompatible) within a poll or two.
    let deadline = tokio::time::Instant::now() + WAIT;
    while client
        .pinned(10)
        .await?
        .iter()
        .all(|p| p.verdicts.is_empty())
    {
        if tokio::time::Instant::now() >= deadline {
            return Err("ledger-1 was never judged".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Fleet {
        queue,
        client,
        stop,
        worker,
    })
}

/// Writes an unreadable parley answer into `thread`'s row and queues it.
pub(crate) fn corrupt_answer(path: &Path, thread: &str) -> Result<(), DemoError> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute(
        "UPDATE aegis_runs SET state = 'queued', answer = '{\"value\": tru' WHERE thread_id = ?1",
        [thread],
    )?;
    Ok(())
}

/// Overwrites `thread`'s latest waypoint with bytes that do not decode.
fn corrupt_latest_waypoint(path: &Path, thread: &str) -> Result<(), DemoError> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute(
        "UPDATE aegis_waypoints SET payload = X'7B2267617262' WHERE thread_id = ?1 \
         AND seq = (SELECT max(seq) FROM aegis_waypoints WHERE thread_id = ?1)",
        [thread],
    )?;
    Ok(())
}
