//! The graph fingerprint is stable: pinned by a golden value, the same in a
//! build where serde_json's `preserve_order` is on, and the same after a
//! node's code moves to another module. So is a node cache key over a
//! snapshot.

#![allow(unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

#[path = "preserve_order/src/golden.rs"]
mod golden;

use aegis::graph::FINGERPRINT_VERSION;
use golden::{GOLDEN_CACHE_KEY, GOLDEN_FINGERPRINT, golden_cache_key, golden_graph};
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn the_golden_graph_has_the_pinned_fingerprint() {
    assert!(GOLDEN_FINGERPRINT.starts_with(&format!("{FINGERPRINT_VERSION}:")));
    assert_eq!(golden_graph().fingerprint(), GOLDEN_FINGERPRINT);
}

#[test]
fn the_golden_cache_key_is_pinned() {
    assert_eq!(golden_cache_key(), GOLDEN_CACHE_KEY);
    assert!(GOLDEN_CACHE_KEY.starts_with(&format!("{}:", aegis::cache::CACHE_KEY_VERSION)));
}

/// Builds and runs `tests/preserve_order`, a project depending on this crate
/// with serde_json's `preserve_order` enabled, and compares the fingerprint
/// it prints.
///
/// Cost: it shares this build's target folder, lock file and dev profile,
/// so only serde_json and the crates above it are rebuilt with the feature
/// (about a minute on a cold CI target folder, seconds once built).
#[test]
fn a_build_with_serde_json_preserve_order_computes_the_same_fingerprint() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let project = root.join("tests/preserve_order");
    // The same dependency versions as this build, so what is already
    // compiled is reused (only indexmap's own dependencies may be fetched,
    // once).
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // The environment cargo gives this test (CARGO_MANIFEST_DIR, CARGO_PKG_*
    // ...) is not the one it builds with: some build scripts (ring's) rerun
    // when it changes, which would rebuild them here and again in the next
    // ordinary build of this workspace.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key == "CARGO" || key.starts_with("CARGO_") || key.starts_with("__CARGO"))
            && key != "CARGO_HOME"
        {
            command.env_remove(&*key);
        }
    }
    let out = command
        .args(["run", "--quiet", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the preserve_order build failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"))
            .to_owned()
    };
    // The feature really is on there: insertion order, not sorted.
    assert_eq!(line("map-order "), "b,a");
    assert_eq!(line("fingerprint "), GOLDEN_FINGERPRINT);
    assert_eq!(line("fingerprint "), golden_graph().fingerprint());
    // Cache keys hash state values through the same canonical encoding.
    assert_eq!(line("cache-key "), GOLDEN_CACHE_KEY);
}

/// The same nodes, as the code sat before a refactor...
mod old_home {
    use aegis::graph::StateNode;
    use aegis::prelude::*;

    #[aegis]
    pub async fn draft(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
        Ok(StateDelta::new())
    }

    pub struct Polish;

    #[async_trait]
    impl StateNode for Polish {
        fn kind_name(&self) -> &str {
            "polish"
        }

        async fn run(&self, _: &Battlefield, _: &NodeContext) -> Result<Directive, StateNodeError> {
            Ok(StateDelta::new().into())
        }
    }
}

/// ...and after it moved them to another module (and renamed the type).
mod moved {
    pub mod deeper {
        use aegis::graph::StateNode;
        use aegis::prelude::*;

        #[aegis]
        pub async fn draft(_: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
            Ok(StateDelta::new())
        }

        pub struct PolishNode;

        #[async_trait]
        impl StateNode for PolishNode {
            fn kind_name(&self) -> &str {
                "polish"
            }

            async fn run(
                &self,
                _: &Battlefield,
                _: &NodeContext,
            ) -> Result<Directive, StateNodeError> {
                Ok(StateDelta::new().into())
            }
        }
    }
}

fn refactor_graph(
    draft: aegis::graph::NodeSpec,
    polish: aegis::graph::NodeSpec,
) -> aegis::graph::WarGraph {
    use aegis::{
        graph::{EngineLimits, WarGraph},
        id::{END, START},
        state::BattlefieldSchema,
    };
    let mut g = WarGraph::new(BattlefieldSchema::default(), EngineLimits::default());
    g.add_node("draft", draft)
        .add_node("polish", polish)
        .add_edge(START, "draft")
        .add_edge("draft", "polish")
        .add_edge("polish", END);
    g
}

#[test]
fn moving_a_nodes_code_to_another_module_leaves_the_fingerprint_unchanged() {
    use aegis::graph::{AegisNodeFn, NodeSpec};
    let before = refactor_graph(
        old_home::draft::node_spec(),
        NodeSpec::function(old_home::Polish),
    );
    let after = refactor_graph(
        moved::deeper::draft::node_spec(),
        NodeSpec::function(moved::deeper::PolishNode),
    );
    assert_eq!(before.fingerprint(), after.fingerprint());
    // The #[aegis] kind is the node id, never a module path.
    let Some(NodeSpec::Function(n)) = after.node("draft") else {
        panic!("draft is not a Function node")
    };
    assert_eq!(n.kind_name(), "draft");
}

#[test]
fn the_kind_its_author_names_is_what_the_fingerprint_hashes() {
    use aegis::graph::NodeSpec;

    struct Renamed;
    #[aegis::async_trait]
    impl aegis::graph::StateNode for Renamed {
        fn kind_name(&self) -> &str {
            "polish_v2"
        }

        async fn run(
            &self,
            _: &aegis::state::Battlefield,
            _: &aegis::graph::NodeContext,
        ) -> Result<aegis::graph::Directive, aegis::error::StateNodeError> {
            Ok(aegis::state::StateDelta::new().into())
        }
    }

    let noop = || {
        NodeSpec::from_fn("draft", |_, _| {
            Box::pin(async { Ok(aegis::state::StateDelta::new().into()) })
        })
    };
    let same = refactor_graph(noop(), NodeSpec::function(old_home::Polish));
    let changed = refactor_graph(noop(), NodeSpec::function(Renamed));
    assert_ne!(same.fingerprint(), changed.fingerprint());
    // A closure node's kind is its from_fn name.
    let renamed_fn = refactor_graph(
        NodeSpec::from_fn("draft_v2", |_, _| {
            Box::pin(async { Ok(aegis::state::StateDelta::new().into()) })
        }),
        NodeSpec::function(old_home::Polish),
    );
    assert_ne!(same.fingerprint(), renamed_fn.fingerprint());
}
