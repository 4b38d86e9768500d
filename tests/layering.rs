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

/// The first segments of a `{ .. }` group opening at `at`: `{a, b::c,
/// d::{e}}` names `a`, `b` and `d`.
fn group_heads(code: &str, at: usize, heads: &mut Vec<(usize, String)>) {
    let mut depth = 0usize;
    let mut expect_head = true;
    let mut i = at;
    while i < code.len() {
        let c = code[i..].chars().next().expect("in bounds");
        match c {
            '{' => {
                depth += 1;
                expect_head = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return;
                }
            }
            ',' if depth == 1 => expect_head = true,
            c if expect_head && (c.is_ascii_alphabetic() || c == '_') => {
                let name = ident_at(code, i);
                heads.push((i, name.to_owned()));
                expect_head = false;
                i += name.len();
                continue;
            }
            _ => {}
        }
        i += c.len_utf8();
    }
}

/// The top-level modules a file's paths reach, with the byte offset of
/// each: every `crate::`/`$crate::` path (a group by each of its heads),
/// and every `super::` chain that climbs above the file's folder.
/// `module_depth` is how many folders deep the file's module is (`engine/
/// run.rs` is module `engine::run`, depth 2; `engine/mod.rs` is depth 1).
fn reached(code: &str, module_depth: usize) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let next = skip_space(code, at + "crate::".len());
        if code[next..].starts_with('{') {
            group_heads(code, next, &mut found);
        } else {
            found.push((at, ident_at(code, next).to_owned()));
        }
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
        // `super` from a module at depth d names depth d-1; reaching depth
        // 0 (the crate root) makes the next segment a top-level module.
        if climbs >= module_depth {
            if code[i..].starts_with('{') {
                group_heads(code, i, &mut found);
            } else {
                found.push((at, ident_at(code, i).to_owned()));
            }
        }
    }
    found
}

/// How deep the module of the file at `rel` (relative to `src/`) is.
fn module_depth(rel: &Path) -> usize {
    let parts = rel.components().count();
    let file = rel.file_name().and_then(|f| f.to_str()).unwrap_or("");
    if file == "mod.rs" { parts - 1 } else { parts }
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
        for (at, target) in reached(&code, module_depth(rel)) {
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
    let names: Vec<_> = reached(&code, 2).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["engine", "graph", "worker", "cache", "waypoint"]);
    // From a folder's own mod.rs (depth 1), one `super::` reaches the root.
    let names: Vec<_> = reached(&code_only("use super::trace::Ev;"), 1)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["trace"]);
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
