//! The runtime's folders depend one way (docs/ARCHITECTURE.md): every path
//! in `aegis-runtime/src` that reaches another top-level module names one
//! at the same level as its own or before it, never one after it. Read from
//! the source text with comments and string literals removed, so a new
//! upward import fails here, not in review, whatever form it takes:
//! `crate::engine::X`, `$crate::engine::X` in a macro, a `crate::{graph,
//! engine::X}` group over several lines, or `super::super::engine` climbing
//! out of a folder.

#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module of `aegis-runtime/src` and its level; a module
/// may use only modules of a lower level (or its own). Modules of one level
/// may not use each other either: each level is a set of independent rules.
const LEVELS: &[(&str, u32)] = &[
    // The leaves, and what the leaves themselves use.
    ("few", 0),
    ("fnv", 0),
    ("canon", 0),
    ("share", 0),
    ("deadline", 0),
    ("spend", 0),
    ("state", 1),
    ("id", 1),
    ("error", 2),
    ("config", 3),
    ("policy", 4),
    ("graph", 5),
    ("trace", 6),
    // The services, in the order they may use each other: an LLM adapter
    // knows no cache, the cache no waypoint.
    ("llm", 7),
    ("cache", 8),
    ("waypoint", 9),
    ("paladin", 10),
    ("render", 10),
    ("engine", 11),
    ("worker", 12),
    ("console", 13),
    // Reads the queue at each scrape; the engine and workers report to it
    // through `trace::observe`, never by name.
    ("metrics", 13),
    ("lib", 14),
    // What the macros' expansions and the workspace's tests reach: crate
    // root modules, above everything they re-export.
    ("__macro_support", 14),
    ("__internal", 14),
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

/// `text` with comments and the contents of string and char literals
/// replaced by spaces (newlines kept, so line numbers still hold): a doc
/// link or a message may name any module, an import may not.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        out.extend_from_slice(b"  ");
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        out.extend_from_slice(b"  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                // A raw string: r"..", r#".."#, ...
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push(b[i]);
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let end = text[j + 1..]
                    .find(std::str::from_utf8(&close).expect("ascii"))
                    .map_or(b.len(), |at| j + 1 + at + close.len());
                for &c in &b[i..end] {
                    blank(&mut out, c);
                }
                i = end;
            }
            b'"' => {
                out.push(b' ');
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        out.push(b' ');
                        i += 1;
                    }
                    if i < b.len() {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
                out.push(b' ');
                i += 1;
            }
            // A char literal ('x', '\n', '"'), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                let end = text[i + 1..]
                    .find('\'')
                    .map_or(b.len(), |at| i + 1 + at + 1);
                let end = if b.get(i + 1) == Some(&b'\\') && b.get(i + 2) == Some(&b'\'') {
                    i + 4
                } else {
                    end
                };
                for &c in &b[i..end.min(b.len())] {
                    blank(&mut out, c);
                }
                i = end;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

fn ident_at(code: &str, at: usize) -> &str {
    let rest = &code[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

fn skip_space(code: &str, mut at: usize) -> usize {
    while code[at..].starts_with(char::is_whitespace) {
        at += code[at..].chars().next().map_or(1, char::len_utf8);
    }
    at
}

/// The paths written from `at` on: `a::b::C` is one, `a::{b::C, d}` two
/// (`a::b::C` and `a::d`), each with the byte offset it starts at. A path
/// ends at the first character that continues neither a segment nor a
/// group.
fn paths_at(code: &str, at: usize, prefix: &[String], out: &mut Vec<(usize, Vec<String>)>) {
    let mut segments = prefix.to_vec();
    let mut i = skip_space(code, at);
    loop {
        if code[i..].starts_with('{') {
            // A group: each element continues the segments so far.
            i += 1;
            loop {
                i = skip_space(code, i);
                if i >= code.len() || code[i..].starts_with('}') {
                    return;
                }
                let start = i;
                paths_at(code, i, &segments, out);
                // Skip to this element's end: a `,` or `}` at its depth.
                let mut depth = 0usize;
                while i < code.len() {
                    let c = code[i..].chars().next().expect("in bounds");
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => break,
                        _ => {}
                    }
                    i += c.len_utf8();
                }
                if code[i..].starts_with(',') {
                    i += 1;
                }
                if i == start {
                    return;
                }
            }
        }
        let name = ident_at(code, i);
        if name.is_empty() {
            break;
        }
        segments.push(name.to_owned());
        i = skip_space(code, i + name.len());
        if code[i..].starts_with("::") {
            i = skip_space(code, i + 2);
        } else {
            break;
        }
    }
    if segments.len() > prefix.len() {
        out.push((at, segments));
    }
}

/// Every path in `code` that names something by its place in the crate,
/// as segments from the crate root, with its byte offset: `crate::` and
/// `$crate::` paths, and `super::` chains resolved against `module`, the
/// path of the file's own module (`["engine", "run"]` for `engine/run.rs`,
/// `["engine"]` for `engine/mod.rs`).
fn crate_paths(code: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        paths_at(code, at + "crate::".len(), &[], &mut found);
    }
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut climbs = 0;
        let mut i = at;
        while code[i..].starts_with("super::") {
            climbs += 1;
            i = skip_space(code, i + "super::".len());
        }
        let Some(kept) = module.len().checked_sub(climbs) else {
            continue;
        };
        let mut here = Vec::new();
        paths_at(code, i, &module[..kept], &mut here);
        found.extend(here.into_iter().map(|(_, p)| (at, p)));
    }
    found
}

/// The top-level modules a file's paths reach (see [`crate_paths`]).
fn reached(code: &str, module: &[String]) -> Vec<(usize, String)> {
    crate_paths(code, module)
        .into_iter()
        .filter_map(|(at, path)| path.into_iter().next().map(|top| (at, top)))
        .collect()
}

/// The module path of the file at `rel` (relative to `src/`):
/// `engine/run.rs` is `engine::run`, `engine/mod.rs` is `engine`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|s| s.trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

#[test]
fn runtime_folders_depend_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("aegis-runtime/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 50, "found the runtime's sources");
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .expect("a top-level module");
        let Some(own) = level(top) else {
            wrong.push(format!(
                "{}: module `{top}` has no level in LEVELS",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(file).expect("readable source");
        let code = code_only(&text);
        for (at, target) in reached(&code, &module_of(rel)) {
            if let Some(theirs) = level(&target)
                && target != top
                && theirs >= own
                && top != "lib"
            {
                wrong.push(format!(
                    "{}:{}: {top} (level {own}) -> {target} (level {theirs})",
                    rel.display(),
                    line_of(&code, at)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports pointing up or across the layering (docs/ARCHITECTURE.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn architecture_lists_every_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("readable");
    let mut missing = Vec::new();
    for entry in fs::read_dir(root.join("aegis-runtime/src")).expect("readable") {
        let path = entry.expect("readable entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8");
        let shown = if path.is_dir() {
            format!("`{name}/`")
        } else {
            format!("`{name}`")
        };
        if name != "lib.rs" && !doc.contains(&shown) {
            missing.push(shown);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's layout table omits {missing:?}"
    );
}

#[test]
fn every_import_form_is_seen() {
    let code = code_only(
        "use crate::engine::WarEngine;\n\
         use crate::{\n    graph::Node,\n    worker::{Client, Pool},\n};\n\
         // use crate::render::Hidden;\n\
         let s = \"crate::llm::InAString\";\n\
         $crate::cache::X;\n\
         use super::super::waypoint::Store;\n\
         use super::sibling::Y;\n",
    );
    let module = ["x".to_owned(), "y".to_owned()];
    let names: Vec<_> = reached(&code, &module)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        names,
        [
            "engine", "graph", "worker", "worker", "cache", "waypoint", "x"
        ]
    );
    // From a folder's own mod.rs, one `super::` reaches the root.
    let names: Vec<_> = reached(&code_only("use super::trace::Ev;"), &["engine".to_owned()])
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["trace"]);
    // Whole paths, groups expanded, for the engine's inner order.
    let paths: Vec<_> = crate_paths(
        &code_only("use super::{activation::{Ctx, Res}, record::Recorder};"),
        &[
            "engine".to_owned(),
            "attempt".to_owned(),
            "retry".to_owned(),
        ],
    )
    .into_iter()
    .map(|(_, p)| p.join("::"))
    .collect();
    assert_eq!(
        paths,
        [
            "engine::attempt::activation::Ctx",
            "engine::attempt::activation::Res",
            "engine::attempt::record::Recorder"
        ]
    );
    assert!(level("engine") > level("graph"));
    assert!(level("llm") < level("cache") && level("cache") < level("waypoint"));
}

#[test]
fn comments_and_literals_are_blanked_line_for_line() {
    let text = "a /* x\ncrate::engine */ b\n'\"' r#\"crate::engine\"# '\\n' 'a\n";
    let code = code_only(text);
    assert_eq!(code.matches('\n').count(), text.matches('\n').count());
    assert!(!code.contains("engine"), "{code:?}");
    assert!(code.contains("'a"), "a lifetime is code: {code:?}");
}

/// The files of `engine/` and their rank: a file may import only files of
/// a lower rank. The types both loops share are leaves; the attempt rules
/// sit below the attempt loop, which sits below the superstep loop.
const ENGINE_ORDER: &[(&str, u32)] = &[
    ("outcome.rs", 0),
    ("hooks.rs", 0),
    ("config.rs", 0),
    ("presets.rs", 0),
    ("index.rs", 0),
    ("run_budget.rs", 0),
    ("ending.rs", 0),
    ("finished.rs", 0),
    // How the attempt layer reaches the engine's store: a Battalion's run.
    ("battalion_call.rs", 0),
    ("tally.rs", 1),
    ("stream/events.rs", 1),
    ("attempt/activation.rs", 1),
    ("cursor.rs", 2),
    ("stream/tap.rs", 2),
    // What the attempt rules run with: the engine but its store.
    ("kit.rs", 3),
    ("stream/run_stream.rs", 3),
    ("attempt/deadline.rs", 4),
    ("attempt/execute.rs", 4),
    ("attempt/handler.rs", 4),
    ("attempt/relay.rs", 4),
    ("attempt/record.rs", 5),
    ("attempt/cache.rs", 6),
    ("attempt/intercept.rs", 6),
    ("attempt/retry.rs", 6),
    ("attempt/traced.rs", 6),
    ("attempt/mod.rs", 7),
    ("stream/mod.rs", 8),
    ("battalion.rs", 8),
    ("evolve.rs", 8),
    ("barrier.rs", 9),
    ("run.rs", 9),
    ("mod.rs", 10),
];

/// The file of the deepest module `path` names (segments from the crate
/// root), relative to `src`: `engine::attempt::record::Recorder` is
/// `engine/attempt/record.rs`.
fn file_of(src: &Path, path: &[String]) -> Option<PathBuf> {
    (1..=path.len()).rev().find_map(|k| {
        let dir: PathBuf = path[..k].iter().collect();
        let file = dir.with_extension("rs");
        let folder = dir.join("mod.rs");
        [file, folder].into_iter().find(|f| src.join(f).is_file())
    })
}

#[test]
fn engine_files_import_down_their_order() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("aegis-runtime/src");
    let engine = src.join("engine");
    let mut files = Vec::new();
    rust_files(&engine, &mut files);
    let rank = |rel: &Path| {
        let key = rel.to_str().map(|s| s.replace('\\', "/"));
        ENGINE_ORDER
            .iter()
            .find(|(f, _)| Some(*f) == key.as_deref())
            .map(|(_, r)| *r)
    };
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&engine).expect("under engine");
        let Some(own) = rank(rel) else {
            wrong.push(format!("engine/{}: no rank in ENGINE_ORDER", rel.display()));
            continue;
        };
        let text = fs::read_to_string(file).expect("readable source");
        let code = code_only(&text);
        let module = module_of(file.strip_prefix(&src).expect("under src"));
        for (at, path) in crate_paths(&code, &module) {
            let Some(target) = file_of(&src, &path) else {
                continue;
            };
            let Ok(target) = target.strip_prefix("engine") else {
                continue;
            };
            // The builders and the superstep loop extend `WarEngine`, defined
            // in engine/mod.rs: naming the engine itself is the one import up
            // the order (the attempt rules extend the `Kit` instead).
            if target == Path::new("mod.rs") && path.last().is_some_and(|s| s == "WarEngine") {
                continue;
            }
            if target == rel {
                continue;
            }
            match rank(target) {
                Some(theirs) if theirs < own => {}
                theirs => wrong.push(format!(
                    "engine/{}:{}: rank {own} imports {} (engine/{}, rank {theirs:?})",
                    rel.display(),
                    line_of(&code, at),
                    path.join("::"),
                    target.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "engine files importing up or across their order:\n{}",
        wrong.join("\n")
    );
}
