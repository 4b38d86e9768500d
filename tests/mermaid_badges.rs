//! `WarGraph::to_mermaid()` shows each node's effective Aegis as a compact
//! badge in its label, and escapes every name it did not write itself.

mod support;

use aegis::prelude::*;
use serde_json::json;
use std::time::Duration;
use support::fixtures::{delta, field_name, schema, write};

use DispatchRule::LastWrite;
use aegis::graph::EngineLimits;
use aegis::policy::CacheKeySpec;
use aegis::policy::ErrorHandlerSpec;

fn policy_graph() -> WarGraph {
    let mut g = WarGraph::new(
        schema(&[("a", LastWrite), ("err", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node("book", write("a", json!(1)))
        .add_node("cancel", write("a", json!(2)))
        .add_node("soak", write("a", json!(3)))
        .add_node("decide", write("a", json!(4)))
        .add_node("plain", write("a", json!(5)))
        .add_edge(START, "book")
        .add_edge("book", "soak")
        .add_edge("soak", "decide")
        .add_edge("decide", "plain")
        .add_edge("plain", END)
        .add_edge("cancel", END)
        .set_aegis(
            "book",
            Aegis::new()
                .with_retry(RetryPolicy::default().with_max_attempts(5))
                .with_timeout(
                    TimeoutPolicy::run(Duration::from_secs(30))
                        .with_idle_timeout(Duration::from_secs(10)),
                )
                .with_on_error(ErrorHandlerSpec::Route {
                    to: NodeId::from("cancel"),
                    error_field: field_name("err"),
                })
                .with_cache(CachePolicy::new(
                    Duration::from_secs(15 * 60),
                    CacheKeySpec::Default,
                )),
        )
        .set_aegis(
            "soak",
            Aegis::new()
                .with_timeout(TimeoutPolicy::run(Duration::from_millis(1500)))
                .with_on_error(ErrorHandlerSpec::Absorb {
                    fallback_delta: delta(&[("a", json!(0))]),
                }),
        )
        .set_aegis(
            "decide",
            Aegis::new()
                .with_on_error(ErrorHandlerSpec::Custom("triage".to_string()))
                .with_cache(CachePolicy::new(
                    Duration::from_secs(90),
                    CacheKeySpec::Default,
                )),
        );
    g
}

/// The Mermaid line declaring the node whose label starts with `name`.
fn node_line<'a>(mermaid: &'a str, name: &str) -> &'a str {
    mermaid
        .lines()
        .find(|l| l.contains(&format!("[\"{name}")))
        .unwrap_or_else(|| panic!("no node `{name}` in\n{mermaid}"))
}

#[test]
fn each_node_label_carries_its_policy_badge() {
    let m = policy_graph().to_mermaid();
    assert!(
        node_line(&m, "book").contains(
            "book<br/><small>retry ×5 · run 30s / idle 10s · route → cancel · cache ttl 15m</small>"
        ),
        "{m}"
    );
    assert!(
        node_line(&m, "soak").contains("soak<br/><small>run 1500ms · absorb</small>"),
        "{m}"
    );
    assert!(
        node_line(&m, "decide")
            .contains("decide<br/><small>custom triage · cache ttl 1m30s</small>"),
        "{m}"
    );
    // No policy, no badge.
    assert!(node_line(&m, "plain").ends_with("[\"plain\"]"), "{m}");
}

#[test]
fn the_graph_default_shows_on_nodes_without_their_own_aegis() {
    let mut g = policy_graph();
    g.with_default_aegis(
        Aegis::new()
            .with_retry(RetryPolicy::default())
            .with_timeout(TimeoutPolicy::idle(Duration::from_secs(10))),
    );
    let m = g.to_mermaid();
    assert!(
        node_line(&m, "plain").contains("plain<br/><small>retry ×3 · idle 10s</small>"),
        "{m}"
    );
    // A node's own entry wins wholesale: nothing of the default is merged in.
    assert!(
        node_line(&m, "soak").contains("<small>run 1500ms · absorb</small>"),
        "{m}"
    );
}

#[test]
fn hostile_names_are_escaped_in_labels_and_badges() {
    let hostile = "x\"]<script>alert(1)</script>#quot;|&\nnext";
    let mut g = WarGraph::new(
        schema(&[("a", LastWrite), ("err", LastWrite)]),
        EngineLimits::default(),
    );
    g.add_node(hostile, write("a", json!(1)))
        .add_node("<b>fix</b>", write("a", json!(2)))
        .add_edge(START, hostile)
        .add_edge(hostile, END)
        .add_edge("<b>fix</b>", END)
        .set_aegis(
            hostile,
            Aegis::new().with_on_error(ErrorHandlerSpec::Route {
                to: NodeId::from("<b>fix</b>"),
                error_field: field_name("err"),
            }),
        );
    let m = g.to_mermaid();
    assert!(!m.contains("<script>"), "{m}");
    assert!(!m.contains("<b>"), "{m}");
    let line = m
        .lines()
        .find(|l| l.contains("alert(1)"))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(
        line.contains(
            "[\"x#quot;]#lt;script#gt;alert(1)#lt;/script#gt;#35;quot;#124;#amp; next\
             <br/><small>route → #lt;b#gt;fix#lt;/b#gt;</small>\"]"
        ),
        "{line}"
    );
    // Every quoted label closes on its own line: one `"` opens, one closes.
    for l in m.lines().filter(|l| l.contains('"')) {
        assert_eq!(l.matches('"').count(), 2, "{l}");
    }
}
