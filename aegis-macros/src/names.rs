//! Names: the field-name rule, node ids, and "did you mean" suggestions.

use syn::Ident;
use syn::ext::IdentExt;

/// The reserved ids of the virtual entry and exit nodes.
pub(crate) const RESERVED_IDS: [&str; 2] = ["__start__", "__end__"];

/// The standard library's stable function-like macros, which every module
/// sees through the prelude. An `#[aegis]` function's descriptor macro is
/// named like the function, so one of these names would shadow the
/// standard macro; `#[aegis]` refuses them and `graph!` does not look for
/// their descriptor.
pub(crate) const STD_MACROS: [&str; 39] = [
    "assert",
    "assert_eq",
    "assert_ne",
    "cfg",
    "column",
    "compile_error",
    "concat",
    "dbg",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "env",
    "eprint",
    "eprintln",
    "file",
    "format",
    "format_args",
    "include",
    "include_bytes",
    "include_str",
    "is_aarch64_feature_detected",
    "is_loongarch_feature_detected",
    "is_riscv_feature_detected",
    "is_x86_feature_detected",
    "line",
    "matches",
    "module_path",
    "option_env",
    "panic",
    "print",
    "println",
    "stringify",
    "thread_local",
    "todo",
    "unimplemented",
    "unreachable",
    "vec",
    "write",
    "writeln",
];

/// An identifier as the runtime sees it (`r#type` is `type`).
pub(crate) fn name_of(ident: &Ident) -> String {
    ident.unraw().to_string()
}

/// Why `name` is not a valid `FieldName` (the runtime's rule:
/// `[A-Za-z_][A-Za-z0-9_]*`), if it is not.
pub(crate) fn field_name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => Some("a field name must not be empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            Some("a field name must start with an ASCII letter or `_`")
        }
        Some(_) if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            Some("a field name may contain only ASCII letters, digits and `_`")
        }
        Some(_) => None,
    }
}

/// The candidate closest to `name`, if one is close enough to be a typo.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `" (did you mean `x`?)"` for an edge endpoint: the closest of the
/// declared `nodes` and of `virtuals` (`START`, `END`, where the edge can
/// take them), or nothing. The virtual nodes are matched whatever the case
/// (`end`, `Start` and `ENDD` all mean them), a node only as declared; a
/// node closer than `START`/`END` wins.
pub(crate) fn did_you_mean_endpoint<'a>(
    name: &str,
    nodes: impl IntoIterator<Item = &'a str>,
    virtuals: &[&'a str],
) -> String {
    let upper = name.to_ascii_uppercase();
    nodes
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .chain(
            virtuals
                .iter()
                .map(|v| (strsim::jaro_winkler(&upper, v), *v)),
        )
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or_else(String::new, |(_, c)| format!(" (did you mean `{c}`?)"))
}

/// `" (did you mean `x`?)"`, or nothing.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    closest(name, candidates).map_or_else(String::new, |c| format!(" (did you mean `{c}`?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_follow_the_runtime_rule() {
        for ok in ["a", "_", "draft", "booking_error", "A1_b2"] {
            assert_eq!(field_name_problem(ok), None, "{ok}");
        }
        for bad in ["", "1a", "a-b", "é", "aé"] {
            assert!(field_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(closest("cancle", ["book", "cancel"]), Some("cancel"));
        assert_eq!(closest("zzz", ["book", "cancel"]), None);
        assert_eq!(did_you_mean("bok", ["book"]), " (did you mean `book`?)");
        assert_eq!(did_you_mean("q", ["book"]), "");
        let raw: Ident = syn::parse_str("r#type").unwrap();
        assert_eq!(name_of(&raw), "type");
    }

    #[test]
    fn suggests_start_and_end_whatever_the_case() {
        let mean = |name, nodes: &[&'static str], virtuals: &[&'static str]| {
            did_you_mean_endpoint(name, nodes.iter().copied(), virtuals)
        };
        for typo in ["ENDD", "end", "End", "ENd", "EN"] {
            assert_eq!(
                mean(typo, &["book"], &["END"]),
                " (did you mean `END`?)",
                "{typo}"
            );
        }
        for typo in ["STRAT", "Start", "start", "STAR"] {
            assert_eq!(
                mean(typo, &["book"], &["START"]),
                " (did you mean `START`?)",
                "{typo}"
            );
        }
        // Only where the edge can take them.
        assert_eq!(mean("ENDD", &["book"], &[]), "");
        // A declared node closer than END wins.
        assert_eq!(
            mean("sendd", &["send"], &["END"]),
            " (did you mean `send`?)"
        );
        assert_eq!(
            mean("canel", &["cancel"], &["START", "END"]),
            " (did you mean `cancel`?)"
        );
        assert_eq!(mean("zzz", &["book"], &["START", "END"]), "");
    }
}
