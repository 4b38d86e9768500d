//! A Paladin worker template renders its prompt with the mustered task in
//! scope (`{task.key}`, `{task.<field>}`): each task sends its own prompt,
//! retried and cached per task, and validation refuses a template that
//! cannot vary per task or names a task field the tasks do not carry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use DispatchRule::*;
use aegis::error::LlmError;
use aegis::error::Transience;
use aegis::graph::EngineLimits;
use aegis::graph::InputMapping;
use aegis::graph::NodeSpec;
use aegis::llm::FallbackLlmAdapter;
use aegis::llm::LlmPort;
use aegis::llm::LlmRequest;
use aegis::llm::LlmResponse;
use aegis::paladin::Paladin;
use aegis::paladin::PaladinExecutionService;
use aegis::policy::CacheKeySpec;
use aegis::prelude::*;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fixtures::*;

/// A provider that answers each prompt with `<answer> to <prompt>`,
/// recording every prompt it was sent; the prompts in `down` always get a
/// 503 (a fallback chain then hops), those in `flaky` one 503 on their first
/// call.
struct Echo {
    name: &'static str,
    seen: Mutex<Vec<String>>,
    down: BTreeSet<String>,
    flaky: Mutex<BTreeSet<String>>,
}

impl Echo {
    fn new(name: &'static str, down: &[String], flaky: &[String]) -> Self {
        Echo {
            name,
            seen: Mutex::new(Vec::new()),
            down: down.iter().cloned().collect(),
            flaky: Mutex::new(flaky.iter().cloned().collect()),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl LlmPort for Echo {
    async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let prompt = request.messages.last().unwrap().content.clone();
        self.seen.lock().unwrap().push(prompt.clone());
        if self.down.contains(&prompt) || self.flaky.lock().unwrap().remove(&prompt) {
            return Err(LlmError::ProviderError {
                provider: self.name.into(),
                status: 503,
                message: "busy".into(),
                retry_after: None,
            });
        }
        Ok(LlmResponse::text(format!("{} to <{prompt}>", self.name)))
    }

    fn get_provider_name(&self) -> &str {
        self.name
    }
}

fn question(i: u32) -> String {
    format!("What is {i} squared?")
}

fn prompt(i: u32) -> String {
    format!("[q{i:02}] {} (topic: numbers)", question(i))
}

/// `START -> plan -> [answer tasks] -> END`; `plan` musters `n` questions.
fn fanout(n: u32, input: InputMapping) -> WarGraph {
    let plan = NodeSpec::from_fn("plan", move |_, _| {
        Box::pin(async move {
            let tasks = (0..n).map(|i| (format!("q{i:02}"), json!({"question": question(i)})));
            Ok(Directive::muster(StateDelta::new(), "answer", tasks))
        })
    });
    let mut g = WarGraph::new(
        schema(&[("topic", LastWrite), ("answers", Append)]),
        EngineLimits::default(),
    );
    g.add_node("plan", plan)
        .add_worker_template(
            "answer",
            NodeSpec::paladin(
                Paladin::new("Answerer").with_model("m"),
                input,
                FieldName::new("answers").unwrap(),
            ),
        )
        .add_edge(START, "plan")
        .add_edge("answer", END);
    g
}

fn per_task() -> InputMapping {
    InputMapping::new("[{task.key}] {task.question} (topic: {topic})")
}

#[tokio::test(start_paused = true)]
async fn twenty_tasks_send_twenty_prompts_merged_in_task_order_and_cached_per_task() {
    // The primary refuses two tasks for good (the chain hops to the
    // backup); two more fail on both providers once (the node retries them).
    let flaky = [prompt(5), prompt(11)];
    let primary = Arc::new(Echo::new("primary", &[prompt(3), prompt(17)], &flaky));
    let backup = Arc::new(Echo::new("backup", &[], &flaky));
    let chain = FallbackLlmAdapter::new(vec![primary.clone(), backup.clone()]).unwrap();
    let port = Arc::new(PaladinExecutionService::new(chain).with_streaming(false));
    let mut g = fanout(20, per_task());
    g.declare_task_fields("answer", ["question"]).set_aegis(
        "answer",
        Aegis::new()
            .with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_interval(Duration::from_millis(10))
                    .with_jitter(false),
            )
            .with_cache(
                CachePolicy::new(Duration::from_secs(3_600), CacheKeySpec::Default)
                    // Tasks 3 and 17 are answered by the backup: cache those
                    // too, so the second run asks nothing.
                    .with_cache_fallback_results(true),
            ),
    );
    g.validate().unwrap();
    let e = WarEngine::new(InMemoryWaypointStore::new())
        .with_paladin_port(port)
        .with_node_cache(InMemoryNodeCache::new());

    let out = e
        .start(&g, "first", json!({"topic": "numbers"}))
        .await
        .unwrap();
    assert!(out.is_clean(), "{out:?}");
    let expected: BTreeSet<String> = (0..20).map(prompt).collect();
    let seen: BTreeSet<String> = primary.seen().into_iter().collect();
    assert_eq!(seen.len(), 20, "20 distinct prompts: {seen:?}");
    assert_eq!(seen, expected);
    // 20 first calls, and the two flaky tasks again on their retry.
    assert_eq!(primary.seen().len(), 22);
    let mut hopped = backup.seen();
    hopped.sort();
    assert_eq!(hopped, [prompt(3), prompt(5), prompt(11), prompt(17)]);
    let answers: Vec<String> = (0..20)
        .map(|i| match i {
            3 | 17 => format!("backup to <{}>", prompt(i)),
            _ => format!("primary to <{}>", prompt(i)),
        })
        .collect();
    assert_eq!(
        out.state().get("answers"),
        Some(&json!(answers)),
        "task order"
    );
    let retried: Vec<String> = e
        .store()
        .history("first")
        .await
        .unwrap()
        .into_iter()
        .flat_map(|w| w.records)
        .filter(|r| r.attempt == 2)
        .filter_map(|r| r.task_key)
        .collect();
    assert_eq!(retried, ["q05", "q11"], "retried per task");

    // A second run asks nothing: each task is cached under its own key.
    let again = e
        .start(&g, "second", json!({"topic": "numbers"}))
        .await
        .unwrap();
    assert_eq!(again.state().get("answers"), Some(&json!(answers)));
    assert_eq!(primary.seen().len(), 22, "served from the cache");
    assert_eq!(backup.seen().len(), 4);
    let hits = e
        .store()
        .history("second")
        .await
        .unwrap()
        .into_iter()
        .flat_map(|w| w.records)
        .filter(|r| r.node_id.as_str() == "answer" && r.cache_hit)
        .count();
    assert_eq!(hits, 20);
}

#[tokio::test(start_paused = true)]
async fn a_missing_task_field_fails_that_task_by_name() {
    let echo = Arc::new(Echo::new("primary", &[], &[]));
    let port = Arc::new(PaladinExecutionService::new(echo.clone()).with_streaming(false));
    // The shape is not declared, so only rendering can tell.
    let g = fanout(2, InputMapping::new("{task.key}: {task.subject}"));
    g.validate().unwrap();
    let e = WarEngine::new(InMemoryWaypointStore::new()).with_paladin_port(port);
    let out = e.start(&g, "t", json!({})).await.unwrap();
    let err = out.node_error().unwrap();
    assert_eq!(err.transience, Transience::Permanent);
    assert!(err.to_string().contains("task field `subject`"), "{err}");
    assert!(echo.seen().is_empty(), "nothing reached the provider");
}

fn task_input_offenders(g: &WarGraph) -> Vec<String> {
    let err = g.validate().unwrap_err();
    err.validation_errors()
        .into_iter()
        .filter_map(|e| match e {
            EngineError::PaladinTaskInput { offenders } => Some(offenders.clone()),
            _ => None,
        })
        .flatten()
        .map(|o| o.to_string())
        .collect()
}

#[test]
fn validation_refuses_an_unknown_task_field_naming_it() {
    let mut g = fanout(1, InputMapping::new("{task.question} / {task.subjct}"));
    g.declare_task_fields("answer", ["question", "subject"]);
    let offenders = task_input_offenders(&g);
    assert_eq!(offenders.len(), 1, "{offenders:?}");
    assert!(
        offenders[0].contains("task field `subjct`")
            && offenders[0].contains("declared: question, subject"),
        "{offenders:?}"
    );
    // `{task.key}` and `{task.payload}` are always there.
    let mut g = fanout(
        1,
        InputMapping::new("{task.key} {task.payload} {task.payload.question}"),
    );
    g.declare_task_fields("answer", ["question"]);
    g.validate().unwrap();
}

#[test]
fn validation_refuses_a_worker_prompt_that_cannot_vary_per_task() {
    let g = fanout(1, InputMapping::new("Answer about {topic}"));
    let offenders = task_input_offenders(&g);
    assert_eq!(offenders.len(), 1, "{offenders:?}");
    assert!(
        offenders[0].contains("`answer`")
            && offenders[0].contains("every task sends the same prompt")
            && offenders[0].contains("task_independent"),
        "{offenders:?}"
    );
    // Said on purpose, it is accepted.
    let g = fanout(
        1,
        InputMapping::new("Answer about {topic}").task_independent(),
    );
    g.validate().unwrap();
}

#[test]
fn validation_refuses_a_task_placeholder_outside_a_worker_template() {
    let mut g = WarGraph::new(schema(&[("answers", LastWrite)]), EngineLimits::default());
    g.add_node(
        "solo",
        NodeSpec::paladin(
            Paladin::new("A").with_model("m"),
            InputMapping::new("{task.question}"),
            FieldName::new("answers").unwrap(),
        ),
    )
    .add_edge(START, "solo")
    .add_edge("solo", END);
    let offenders = task_input_offenders(&g);
    assert_eq!(offenders.len(), 1, "{offenders:?}");
    assert!(
        offenders[0].contains("`{task.question}`")
            && offenders[0].contains("not a worker template"),
        "{offenders:?}"
    );
}
