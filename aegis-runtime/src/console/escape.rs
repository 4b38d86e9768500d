//! Escaping every value the console writes into a page or a link: thread
//! ids, node names, error texts and prompts are whatever a user, a node or
//! a provider made them.

/// `s` safe as HTML text and inside a quoted attribute: the timeline's
/// escape, so every page Aegis writes escapes alike.
pub(crate) use crate::render::esc as escape;

/// `s` as one query-string value: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - . _ ~`) percent-encoded, so a thread id with `&`, `#`,
/// `=` or spaces names itself in a link.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_become_references() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }

    #[test]
    fn an_attribute_cannot_be_closed() {
        let hostile = r#"" onmouseover="alert(1)"#;
        let attr = format!(r#"<a title="{}">"#, escape(hostile));
        assert_eq!(attr.matches('"').count(), 2, "{attr}");
        assert!(!attr.contains("\" on"));
    }

    #[test]
    fn control_characters_are_replaced_and_text_kept() {
        assert_eq!(
            escape("a\u{0}b\u{1b}[31m\nc\td"),
            "a\u{FFFD}b\u{FFFD}[31m\nc\td"
        );
        assert_eq!(escape("thread-é 東京"), "thread-é 東京");
    }

    #[test]
    fn query_values_keep_only_unreserved_bytes() {
        assert_eq!(url_encode("a b&c=d#e/é"), "a%20b%26c%3Dd%23e%2F%C3%A9");
        assert_eq!(url_encode("job-1.x_~"), "job-1.x_~");
    }
}
