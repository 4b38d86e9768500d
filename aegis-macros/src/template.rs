//! The fields a Paladin input template names, by the runtime's
//! `InputMapping` rule: `{field}` is a field, `{{` and `}}` are braces.

/// The names inside `{..}`, in order; `Err` for a `{` without its `}`.
pub(crate) fn template_fields(template: &str) -> Result<Vec<String>, ()> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            rest = &tail[2..];
        } else if let Some(stripped) = tail.strip_prefix('{') {
            let end = stripped.find('}').ok_or(())?;
            out.push(stripped[..end].trim().to_string());
            rest = &stripped[end + 1..];
        } else {
            rest = &tail[1..];
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_fields_and_skips_escapes() {
        assert_eq!(
            template_fields("Q: {q} {{literal}} n={ n }").unwrap(),
            ["q", "n"]
        );
        assert!(template_fields("no fields }").unwrap().is_empty());
        assert!(template_fields("{oops").is_err());
    }
}
