//! Escaping and number formatting for the HTML/SVG the timeline writes.

use std::fmt::Write;

/// `s` safe as HTML/SVG text and inside a quoted attribute: `&`, `<`, `>`,
/// `"` and `'` become character references; a control character other than
/// a line break or a tab becomes U+FFFD, so nothing invisible reaches the
/// page. The one escape of every page Aegis writes (the timeline and the
/// console).
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of `s`, with `…` when cut.
pub(super) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A span of milliseconds for people: `0ms`, `40ms`, `1.25s`, `2m05s`.
pub(super) fn ms(v: f64) -> String {
    let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
    if v < 1000.0 {
        return format!("{}ms", v.round());
    }
    if v < 60_000.0 {
        let mut s = format!("{:.2}", v / 1000.0);
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
        return format!("{s}s");
    }
    let secs = (v / 1000.0).round() as u64;
    let mut out = String::new();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        let _ = write!(out, "{h}h{m:02}m");
    } else {
        let _ = write!(out, "{m}m{s:02}s");
    }
    out
}

/// A pixel coordinate, to one decimal.
pub(super) fn px(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert('x')</script>&\"\u{7}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{FFFD}"
        );
    }

    #[test]
    fn formats_spans() {
        assert_eq!(ms(0.0), "0ms");
        assert_eq!(ms(40.4), "40ms");
        assert_eq!(ms(1250.0), "1.25s");
        assert_eq!(ms(2000.0), "2s");
        assert_eq!(ms(125_000.0), "2m05s");
        assert_eq!(ms(f64::NAN), "0ms");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
        assert_eq!(px(1.25), "1.3");
        assert_eq!(px(3.0), "3");
    }
}
