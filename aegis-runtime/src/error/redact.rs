//! The one shared mapping from a provider's non-2xx HTTP response to an
//! [`LlmError`], and the redaction it applies to provider text.
//!
//! Order is load-bearing: credentials are redacted from the whole body
//! *first*, and only then is the result bounded to [`EXCERPT_LIMIT`]
//! characters. Bounding first could slice a secret across the truncation
//! boundary and leak its surviving head, and a redactor looking only at the
//! excerpt could no longer recognise the cut-off key.

use std::time::{Duration, SystemTime};

use super::{KnownSecrets, LlmError};

/// The most characters (not bytes) of provider text an error carries.
#[doc(hidden)]
pub const EXCERPT_LIMIT: usize = 512;

/// What a redacted credential is replaced with.
#[doc(hidden)]
pub const REDACTED: &str = "[REDACTED]";

/// Token prefixes of well-known API keys; what follows them is a secret.
const KEY_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxr-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "hf_",
    "AIza",
];

/// A prefixed key (or a bearer token) must have at least this many
/// characters after its prefix, so ordinary words such as "risk-free" or
/// "the bearer of" are left alone; no real credential is shorter.
const MIN_SECRET: usize = 8;

/// Names whose value is a credential, matched case-insensitively when they
/// are followed by `:` or `=` (optionally quoted, as in JSON or a header dump).
const SECRET_KEYS: &[&str] = &[
    "authorization",
    "x-api-key",
    "api-key",
    "api_key",
    "apikey",
    "secret_key",
    "secret",
    "password",
    "passwd",
    "credentials",
    "credential",
    "token",
];

/// Replaces every credential-shaped substring of `text` with [`REDACTED`]:
/// `sk-...`-style keys (and other well-known key prefixes), `Bearer <token>`,
/// and the value of any `authorization`, `x-api-key`, `api_key`, `token`,
/// `secret`, `password`, ... key, quoted or not.
///
/// Over-redaction is preferred to a leak: error text is for humans, and a
/// redacted word costs less than a published key.
#[doc(hidden)]
pub fn redact_secrets(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match secret_at(bytes, i) {
            Some((start, mut end)) => {
                // A value that is itself a secret's key (`token: "x-api-key":
                // "..."`) must not hide the secret after it: scanning resumes
                // after what is redacted, so the span swallows the nested
                // key-value pairs too.
                let mut probe = start;
                for _ in 0..8 {
                    match keyed_value_at(bytes, probe) {
                        Some((nested_start, nested_end)) if nested_end > end => {
                            end = nested_end;
                            probe = nested_start;
                        }
                        _ => break,
                    }
                }
                // Every pattern starts and ends on an ASCII byte or at the end
                // of the text, so both are char boundaries.
                out.push_str(&text[copied..start]);
                out.push_str(REDACTED);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Bounds `text` to [`EXCERPT_LIMIT`] characters, cutting on a char boundary
/// and marking the cut with `…` (which counts towards the limit).
#[doc(hidden)]
pub fn bound_excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_LIMIT) {
        None => text.to_string(),
        Some(_) => {
            let cut = text
                .char_indices()
                .nth(EXCERPT_LIMIT - 1)
                .map_or(text.len(), |(i, _)| i);
            let mut s = String::with_capacity(cut + 3);
            s.push_str(&text[..cut]);
            s.push('…');
            s
        }
    }
}

/// Redacts, then bounds: what any provider text must pass through before it
/// enters an error.
#[doc(hidden)]
pub fn redact_excerpt(text: &str) -> String {
    bound_excerpt(&redact_secrets(text))
}

/// Maps a provider's non-2xx response to an [`LlmError`].
///
/// * 401 → [`LlmError::AuthenticationError`],
/// * 429 → [`LlmError::RateLimited`] with the parsed `Retry-After`
///   (`retry-after-ms`, then `Retry-After` as seconds or an HTTP-date),
/// * every other status → [`LlmError::ProviderError`], whose `status` the
///   transience table reads, with the same parsed hint when the response
///   sent one (a 503 often does).
///
/// `body` is redacted, then bounded to [`EXCERPT_LIMIT`] characters.
/// `headers` are `(name, value)` pairs, names matched case-insensitively;
/// only the retry hints are read. Adapter-specific pre-checks (an error
/// envelope inside a 200, Anthropic's 403) run before this and never repeat
/// its table.
///
/// [`KnownSecrets::map_http_status`] also removes known secret values.
#[doc(hidden)]
pub fn map_http_status(
    provider: &str,
    status: u16,
    body: &str,
    headers: &[(&str, &str)],
) -> LlmError {
    KnownSecrets::default().map_http_status(provider, status, body, headers)
}

impl KnownSecrets {
    /// [`map_http_status`](fn@map_http_status), with every secret of this
    /// set removed from the body before it is redacted and bounded.
    pub fn map_http_status(
        &self,
        provider: &str,
        status: u16,
        body: &str,
        headers: &[(&str, &str)],
    ) -> LlmError {
        match status {
            401 => LlmError::AuthenticationError(bound_excerpt(&format!(
                "{provider}: authentication failed: {}",
                self.redact(body)
            ))),
            429 => LlmError::RateLimited {
                retry_after: retry_after_hint(headers, SystemTime::now()),
            },
            _ => LlmError::ProviderError {
                provider: provider.to_string(),
                status,
                message: self.redact_excerpt(body),
                retry_after: retry_after_hint(headers, SystemTime::now()),
            },
        }
    }
}

/// The retry hint of a response: `retry-after-ms` (milliseconds, as OpenAI
/// sends it) wins over `Retry-After` (seconds or an HTTP-date).
///
/// Any header text is accepted without panicking. A hint that is negative,
/// NaN or unreadable is no hint (`None`); a fractional one is kept to the
/// nanosecond; a hint too large for a [`Duration`] is [`Duration::MAX`]
/// ("not in this process's lifetime"); a date in the past is zero.
#[doc(hidden)]
pub fn retry_after_hint(headers: &[(&str, &str)], now: SystemTime) -> Option<Duration> {
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(ms) = find("retry-after-ms") {
        // Whole milliseconds are exact; only a fractional hint goes through f64.
        if let Ok(ms) = ms.parse::<u64>() {
            return Some(Duration::from_millis(ms));
        }
        if let Some(ms) = non_negative_f64(ms) {
            return Some(saturating_secs_f64(ms / 1000.0));
        }
    }
    find("retry-after").and_then(|v| parse_retry_after(v, now))
}

/// Parses one `Retry-After` value: delay-seconds (whole or, leniently,
/// fractional), or an HTTP-date (a date in the past means "now": zero).
/// Negative, NaN or unreadable values are `None`; a delay too large for a
/// [`Duration`] is [`Duration::MAX`].
#[doc(hidden)]
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Some(secs) = non_negative_f64(value) {
        return Some(saturating_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A number that can be a delay: finite or +∞, and not negative.
fn non_negative_f64(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| !v.is_nan() && *v >= 0.0)
}

/// `Duration::from_secs_f64` panics past `Duration::MAX`; a hint that large
/// means "not in this process's lifetime", so it saturates.
fn saturating_secs_f64(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// The secret starting at byte `i`, as a `[start, end)` byte range to
/// replace.
fn secret_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    // Every pattern starts with one of these letters; most bytes of a body
    // are rejected here without trying each pattern.
    if !matches!(
        b[i].to_ascii_lowercase(),
        b'a' | b'b' | b'c' | b'g' | b'h' | b'p' | b's' | b't' | b'x'
    ) {
        return None;
    }
    bearer_at(b, i)
        .or_else(|| prefixed_key_at(b, i))
        .or_else(|| keyed_value_at(b, i))
}

fn is_token_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

/// Characters of an opaque credential (base64, base64url, JWT, hex).
fn is_credential_byte(c: u8) -> bool {
    is_token_byte(c) || matches!(c, b'.' | b'~' | b'+' | b'/' | b'=')
}

fn starts_with_ignore_case(b: &[u8], i: usize, pat: &str) -> bool {
    b.get(i..i + pat.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(pat.as_bytes()))
}

fn span(b: &[u8], from: usize, pred: impl Fn(u8) -> bool) -> usize {
    b[from..]
        .iter()
        .position(|c| !pred(*c))
        .map_or(b.len(), |n| from + n)
}

/// `Bearer <token>`: the token goes, the scheme word stays.
fn bearer_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    const SCHEME: &str = "bearer";
    if !starts_with_ignore_case(b, i, SCHEME) {
        return None;
    }
    let after = i + SCHEME.len();
    let start = span(b, after, |c| c == b' ' || c == b'\t');
    if start == after {
        return None;
    }
    let end = span(b, start, is_credential_byte);
    (end - start >= MIN_SECRET).then_some((start, end))
}

/// `sk-...`, `ghp_...`, `AIza...`: the whole key goes.
fn prefixed_key_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    KEY_PREFIXES.iter().find_map(|p| {
        if !b[i..].starts_with(p.as_bytes()) {
            return None;
        }
        let after = i + p.len();
        let end = span(b, after, is_token_byte);
        (end - after >= MIN_SECRET).then_some((i, end))
    })
}

/// `api_key: value`, `"x-api-key": "value"`, `password=value`,
/// `Authorization: Basic abc`: the value goes, the key stays.
fn keyed_value_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let key = SECRET_KEYS
        .iter()
        .find(|k| starts_with_ignore_case(b, i, k) && separator_after(b, i + k.len()).is_some())?;
    let value_at = separator_after(b, i + key.len())?;
    let (quote, start) = opening_quote(b, value_at);
    // A bracketed value (`["Bearer …"]`, or `[REDACTED]` from an earlier
    // pass) goes whole, brackets included: cut at its `]`, it printed as
    // `[REDACTED]]`, and redacting twice must change nothing.
    if quote.is_none() && b.get(start) == Some(&b'[') {
        let close = span(b, start + 1, |c| c != b']' && c != b'\n');
        if b.get(close) == Some(&b']') {
            return Some((start, close + 1));
        }
    }
    let end = match quote {
        // The value runs to its closing quote (or a backslash, for a quote
        // escaped inside a JSON string).
        Some(q) => span(b, start, |c| c != q && c != b'\\' && c != b'\n'),
        // An authorization value is a scheme *and* a credential, so spaces
        // do not end it.
        None if *key == "authorization" => span(b, start, |c| {
            !matches!(
                c,
                b'\r' | b'\n' | b',' | b';' | b'&' | b'"' | b'\'' | b'}' | b']'
            )
        }),
        None => span(b, start, |c| {
            !c.is_ascii_whitespace()
                && !matches!(
                    c,
                    b',' | b';' | b'&' | b'"' | b'\'' | b'}' | b']' | b')' | b'<'
                )
        }),
    };
    (end > start).then_some((start, end))
}

/// After a key: an optional closing quote, spaces, `:` or `=`, spaces.
/// Returns where the value (or its opening quote) starts.
fn separator_after(b: &[u8], mut j: usize) -> Option<usize> {
    if b.get(j) == Some(&b'\\') && b.get(j + 1) == Some(&b'"') {
        j += 2;
    } else if matches!(b.get(j), Some(b'"' | b'\'')) {
        j += 1;
    }
    j = span(b, j, |c| c == b' ' || c == b'\t');
    if !matches!(b.get(j), Some(b':' | b'=')) {
        return None;
    }
    Some(span(b, j + 1, |c| c == b' ' || c == b'\t'))
}

fn opening_quote(b: &[u8], j: usize) -> (Option<u8>, usize) {
    match b.get(j) {
        Some(b'\\') if b.get(j + 1) == Some(&b'"') => (Some(b'"'), j + 2),
        Some(q @ (b'"' | b'\'')) => (Some(*q), j + 1),
        _ => (None, j),
    }
}

/// Redacts `value` in place, for JSON that is recorded (an effect's
/// result): the value of every object key named like a credential
/// (`password`, `token`, `authorization`, ...) whole, and every
/// credential-shaped substring of every other string.
pub(crate) fn redact_json(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let redacted = redact_secrets(s);
            if redacted != *s {
                *s = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if SECRET_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k)) {
                    *v = Value::String(REDACTED.to_string());
                } else {
                    redact_json(v);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod json_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_keys_and_secret_strings_are_redacted_everywhere() {
        let mut v = json!({
            "charge": "ch_1",
            "Token": "abc",
            "nested": [{"note": "key sk-abcdefghijklmnopqrstuvwx here", "password": 3}],
        });
        redact_json(&mut v);
        assert_eq!(v["charge"], "ch_1");
        assert_eq!(v["Token"], REDACTED);
        assert_eq!(v["nested"][0]["password"], REDACTED);
        let note = v["nested"][0]["note"].as_str().unwrap_or_default();
        assert!(!note.contains("sk-abcdefghijklmnopqrstuvwx"), "{note}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Transience;

    #[test]
    fn a_bracketed_value_goes_whole_and_redacting_twice_changes_nothing() {
        for (text, want) in [
            (
                r#"{"authorization": ["Bearer abcdefgh12345678"]}"#,
                r#"{"authorization": [REDACTED]}"#,
            ),
            ("authorization: [REDACTED]", "authorization: [REDACTED]"),
            ("token=[abc def] next", "token=[REDACTED] next"),
        ] {
            let once = redact_secrets(text);
            assert_eq!(once, want, "{text}");
            assert_eq!(redact_secrets(&once), once, "idempotent: {text}");
        }
        for text in [
            "Authorization: Bearer abcdefgh12345678\nnext",
            r#"{"x-api-key": "k-123456789", "a": 1}"#,
            "password='hunter2' and sk-proj-abcdefghijklmnop",
        ] {
            let once = redact_secrets(text);
            assert_eq!(redact_secrets(&once), once, "idempotent: {text}");
        }
    }

    #[test]
    fn a_key_name_as_a_value_does_not_hide_the_secret_after_it() {
        // Found by the map_http_status fuzz target.
        let leaked = "AbcdefSecret0123";
        for text in [
            format!("token: \"x-api-key\": \"{leaked}\""),
            format!("password=api_key={leaked}"),
            format!("{{\"secret\": \"token\": \"{leaked}\"}}"),
        ] {
            let out = redact_secrets(&text);
            assert!(!out.contains("Secret0123"), "{text:?} -> {out:?}");
            assert!(out.contains(REDACTED), "{out:?}");
        }
    }

    #[test]
    fn redacts_each_credential_shape() {
        let cases = [
            ("key sk-proj-abcdefghijklmnop here", "key [REDACTED] here"),
            (
                "Authorization: Bearer abc.def-ghi\nnext",
                "Authorization: [REDACTED]\nnext",
            ),
            (
                "sent Bearer eyJhbGciOi.x_y= ok",
                "sent Bearer [REDACTED] ok",
            ),
            (
                r#"{"x-api-key": "k123", "a": 1}"#,
                r#"{"x-api-key": "[REDACTED]", "a": 1}"#,
            ),
            ("X-Api-Key: k123 rest", "X-Api-Key: [REDACTED] rest"),
            ("url?api_key=abc123&x=1", "url?api_key=[REDACTED]&x=1"),
            (
                r#"{\"api_key\": \"abc\"}"#,
                r#"{\"api_key\": \"[REDACTED]\"}"#,
            ),
            ("password='hunter2'", "password='[REDACTED]'"),
            ("ghp_0123456789abcdef", "[REDACTED]"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_secrets(input), want, "input: {input}");
        }
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for text in [
            "risk-free upstream overloaded",
            r#"{"max_tokens": 100, "prompt_tokens": 3}"#,
            "the bearer of bad news:",
            "héllo wörld ✓",
        ] {
            assert_eq!(redact_secrets(text), text);
        }
    }

    #[test]
    fn bounds_on_a_char_boundary() {
        let long = "é".repeat(600);
        let b = bound_excerpt(&long);
        assert_eq!(b.chars().count(), EXCERPT_LIMIT);
        assert!(b.ends_with('…'));
        let exact = "x".repeat(EXCERPT_LIMIT);
        assert_eq!(bound_excerpt(&exact), exact);
    }

    #[test]
    fn maps_statuses_through_one_table() {
        let e = map_http_status("openai", 401, "bad key sk-abcdefghijkl", &[]);
        assert!(
            matches!(&e, LlmError::AuthenticationError(m) if m == "openai: authentication failed: bad key [REDACTED]")
        );
        assert_eq!(e.transience(), Transience::Permanent);

        let e = map_http_status("openai", 429, "slow down", &[("Retry-After", "7")]);
        assert_eq!(
            e,
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        let e = map_http_status(
            "openai",
            429,
            "",
            &[("retry-after-ms", "250"), ("retry-after", "9")],
        );
        assert_eq!(
            e,
            LlmError::RateLimited {
                retry_after: Some(Duration::from_millis(250))
            }
        );

        for (status, t) in [
            (403, Transience::Permanent),
            (500, Transience::Transient),
            (503, Transience::Transient),
            (404, Transience::Permanent),
            (200, Transience::Unknown),
        ] {
            let e = map_http_status("p", status, "body", &[]);
            assert_eq!(
                e,
                LlmError::ProviderError {
                    provider: "p".into(),
                    status,
                    message: "body".into(),
                    retry_after: None,
                }
            );
            assert_eq!(e.transience(), t);
        }
    }

    #[test]
    fn parses_retry_after_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after(" 12 ", now),
            Some(Duration::from_secs(12))
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
