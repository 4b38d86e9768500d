//! The runtime's folders depend one way (README "Layout"): every
//! `crate::<folder>` path in `aegis-runtime/src` names a folder at the same
//! level as its own or before it, never one after it. Read from the source
//! text, so a new upward import fails here, not in review.

#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module of `aegis-runtime/src` and its level; a module
/// may use only modules of a lower level (or its own).
const LEVELS: &[(&str, u32)] = &[
    ("state", 0),
    ("id", 0),
    ("config", 0),
    ("deadline", 0),
    ("canon", 0),
    ("few", 0),
    ("share", 0),
    ("error", 0),
    ("policy", 1),
    ("graph", 2),
    ("trace", 3),
    ("llm", 4),
    ("cache", 4),
    ("waypoint", 4),
    ("paladin", 5),
    ("render", 5),
    ("engine", 6),
    ("worker", 7),
    // Reads the queue at each scrape; the engine and workers report to it
    // through `trace::observe`, never by name.
    ("metrics", 8),
    ("lib", 8),
    // What the macros' expansions and the workspace's tests reach: crate
    // root modules, above everything they re-export.
    ("__macro_support", 8),
    ("__internal", 8),
];

fn level(module: &str) -> Option<u32> {
    LEVELS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module names following each `crate::` in `text`, outside comments:
/// a doc link may point anywhere, an import may not.
fn crate_paths(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let in_comment = move |at: usize| {
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        text[line_start..at].trim_start().starts_with("//")
    };
    text.match_indices("crate::")
        .filter(move |(at, _)| !in_comment(*at))
        .map(move |(at, _)| {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let line = text[..at].matches('\n').count() + 1;
            (line, &rest[..end])
        })
}

#[test]
fn runtime_folders_depend_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("aegis-runtime/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 50, "found the runtime's sources");
    let mut upward = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .expect("a top-level module");
        let Some(own) = level(top) else {
            upward.push(format!(
                "{}: module `{top}` has no level in LEVELS",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(file).expect("readable source");
        for (line, target) in crate_paths(&text) {
            if let Some(theirs) = level(target)
                && target != top
                && theirs > own
            {
                upward.push(format!("{}:{line}: {top} -> {target}", rel.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing up the layering (README \"Layout\"):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    let found: Vec<_> =
        crate_paths("use crate::engine::WarEngine;\nuse crate::state::X;").collect();
    assert_eq!(found, [(1, "engine"), (2, "state")]);
    assert!(level("engine") > level("graph"));
}
