//! Connection strings (Redis and PostgreSQL URLs, libpq `key=value`
//! strings) with their credentials removed, however malformed they are.
//!
//! An operator's typo is exactly when a connection string ends up quoted in
//! an error, so the redaction cannot rely on the string parsing: it removes
//! too much rather than too little. Two passes:
//!
//! 1. URL userinfo: everything between the scheme (`redis://`, `redis:/`,
//!    none at all) and the *last* `@` (a password may hold an unencoded `@`,
//!    `/`, `?` or `#`). Without any `@`, an authority `user:pw` whose part
//!    after `:` is not a port loses that part.
//! 2. Parameters, `key=value` (libpq: unquoted, or `'quoted'` with `\'`
//!    escapes, spaces allowed around `=`) and `?key=value&` (URL queries):
//!    every value loses its text except that of a well-known plain setting
//!    (`host`, `port`, `dbname`, `user`, `sslmode`, ...), so a misspelt
//!    `pasword=` is hidden as surely as `password=`.

use super::REDACTED;

/// Settings whose value is never a credential, shown as they are (matched
/// case-insensitively); any other key's value is redacted.
const PLAIN_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "db",
    "database",
    "user",
    "username",
    "application_name",
    "options",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "protocol",
    "timeout",
    "search_path",
];

/// Key fragments whose value is a credential, even when they extend a
/// plain key (`userpassword`).
const SECRET_KEY_PARTS: &[&str] = &["pass", "pwd", "secret", "token", "key"];

/// `s` with every credential it may carry replaced by [`REDACTED`]: a URL's
/// userinfo (`redis://user:pw@host` → `redis://[REDACTED]@host`) and the
/// value of any parameter but a well-known plain setting (`password=pw`,
/// `password='p w'`, `?password=pw`, a misspelt `pasword=pw`), also when
/// the string is malformed (`redis:/u:pw@h`, `redis//:pw@h`, `u:pw@h`, an
/// unterminated quote).
///
/// ```
/// use aegis_runtime::__internal::redact_connection_string;
///
/// assert_eq!(redact_connection_string("redis://:pw@cache:6379/0"), "redis://[REDACTED]@cache:6379/0");
/// assert_eq!(
///     redact_connection_string("host=db user=app password='s3 cret' dbname=x"),
///     "host=db user=app password=[REDACTED] dbname=x"
/// );
/// ```
#[doc(hidden)]
pub fn redact_connection_string(s: &str) -> String {
    redact_parameters(&redact_userinfo(s))
}

/// `text` with every occurrence of each non-empty `secret` replaced by
/// [`REDACTED`]: what a driver's message might echo of a known password.
#[cfg(any(feature = "redis-cache", feature = "postgres", test))]
pub(crate) fn scrub_values<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        if !secret.is_empty() && out.contains(secret) {
            out = out.replace(secret, REDACTED);
        }
    }
    out
}

/// The length of a URL scheme (`name:` followed by at least one `/`) at the
/// start of `s`, slashes included; 0 when there is none.
fn scheme_len(s: &str) -> usize {
    let b = s.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_alphabetic) {
        return 0;
    }
    let name = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'.' | b'-'))
        .count();
    if b.get(name) != Some(&b':') || b.get(name + 1) != Some(&b'/') {
        return 0;
    }
    name + 1 + b[name + 1..].iter().take_while(|&&c| c == b'/').count()
}

/// Whether `s` reads as libpq `key=value` pairs rather than a URL: it starts
/// with a keyword followed by `=` and has no scheme.
fn looks_like_key_value(s: &str) -> bool {
    let t = s.trim_start();
    let key = t
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
        .count();
    key > 0 && t[key..].trim_start().starts_with('=')
}

fn redact_userinfo(s: &str) -> String {
    let start = scheme_len(s);
    if start == 0 && looks_like_key_value(s) {
        return s.to_string();
    }
    let rest = &s[start..];
    if let Some(at) = rest.rfind('@') {
        return format!("{}{REDACTED}{}", &s[..start], &rest[at..]);
    }
    // No `@`: `scheme://user:pw` (a missing host) still hides `pw`, while
    // `host:6379` and `[::1]:6379` are left alone.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if let Some(colon) = authority.find(':')
        && !authority.starts_with('[')
    {
        let after = &authority[colon + 1..];
        if !after.is_empty() && !after.bytes().all(|c| c.is_ascii_digit()) {
            return format!(
                "{}{}{REDACTED}{}",
                &s[..start],
                &authority[..=colon],
                &rest[authority_end..]
            );
        }
    }
    s.to_string()
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEY_PARTS.iter().any(|part| key.contains(part)) || !PLAIN_KEYS.contains(&key.as_str())
}

fn redact_parameters(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'=' {
            i += 1;
            continue;
        }
        // The key: the word before `=`, spaces allowed in between.
        let mut key_end = i;
        while key_end > 0 && b[key_end - 1].is_ascii_whitespace() {
            key_end -= 1;
        }
        let mut key_start = key_end;
        while key_start > 0
            && (b[key_start - 1].is_ascii_alphanumeric() || b[key_start - 1] == b'_')
        {
            key_start -= 1;
        }
        let in_query = key_start > 0 && matches!(b[key_start - 1], b'?' | b'&');
        if key_start == key_end || !is_secret_key(&s[key_start..key_end]) {
            i += 1;
            continue;
        }
        let mut value_start = i + 1;
        while value_start < b.len() && b[value_start].is_ascii_whitespace() && !in_query {
            value_start += 1;
        }
        let value_end = value_end(b, value_start, in_query);
        // Every boundary is an ASCII byte or the end of the text, so a
        // char boundary.
        out.push_str(&s[copied..value_start]);
        out.push_str(REDACTED);
        copied = value_end;
        i = value_end.max(i + 1);
    }
    out.push_str(&s[copied..]);
    out
}

/// Where a parameter value starting at `from` ends: after its closing quote
/// (or at the end, unterminated), else at whitespace (and, in a URL query,
/// at `&` or `#`).
fn value_end(b: &[u8], from: usize, in_query: bool) -> usize {
    match b.get(from) {
        Some(&q @ (b'\'' | b'"')) => {
            let mut j = from + 1;
            while j < b.len() {
                match b[j] {
                    b'\\' => j += 2,
                    c if c == q => return j + 1,
                    _ => j += 1,
                }
            }
            b.len()
        }
        _ => {
            let mut j = from;
            while j < b.len() {
                match b[j] {
                    b'\\' if !in_query => j += 2,
                    c if c.is_ascii_whitespace() => break,
                    b'&' | b'#' if in_query => break,
                    _ => j += 1,
                }
            }
            j.min(b.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_urls_lose_their_password() {
        for (input, expected) in [
            ("redis://h:1/0", "redis://h:1/0"),
            ("redis://[::1]:6379", "redis://[::1]:6379"),
            ("redis://:pw@h:1", "redis://[REDACTED]@h:1"),
            ("redis://user:pw@host/0", "redis://[REDACTED]@host/0"),
            ("redis:/user:pw@host", "redis:/[REDACTED]@host"),
            ("redis//:pw@host", "[REDACTED]@host"),
            ("redis://:pw@", "redis://[REDACTED]@"),
            ("user:pw@host", "[REDACTED]@host"),
            ("redis://u:p%40ss@host", "redis://[REDACTED]@host"),
            (
                "redis://u:p@ss/w?rd#x@host:1/0",
                "redis://[REDACTED]@host:1/0",
            ),
            ("redis://user:pw", "redis://user:[REDACTED]"),
            ("rediss://u:pw@h/0?x=a@b", "rediss://[REDACTED]@b"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=pw&user=u",
                "redis+unix:///tmp/r.sock?db=1&pass=[REDACTED]&user=u",
            ),
            (
                "rediss://h/0?protocol=resp3&pasword=pw",
                "rediss://h/0?protocol=resp3&pasword=[REDACTED]",
            ),
            (
                "postgresql://app:pw@db:5432/x?sslmode=disable&password=pw2",
                "postgresql://[REDACTED]@db:5432/x?sslmode=disable&password=[REDACTED]",
            ),
            (
                "postgres://db/x?password=pw#frag",
                "postgres://db/x?password=[REDACTED]#frag",
            ),
        ] {
            assert_eq!(redact_connection_string(input), expected, "{input}");
        }
    }

    #[test]
    fn key_value_strings_lose_password_values_quoted_or_not() {
        for (input, expected) in [
            (
                "host=x password=pw dbname=d",
                "host=x password=[REDACTED] dbname=d",
            ),
            ("password='p w' host=x", "password=[REDACTED] host=x"),
            (
                "host=x password = 'it\\'s a secret' user=u",
                "host=x password = [REDACTED] user=u",
            ),
            ("host=x PASSWORD=pw", "host=x PASSWORD=[REDACTED]"),
            (
                "host=x password='unterminated secret",
                "host=x password=[REDACTED]",
            ),
            (
                "host=x password=p\\ w user=u",
                "host=x password=[REDACTED] user=u",
            ),
            (
                "host=x sslpassword=k passfile=/p",
                "host=x sslpassword=[REDACTED] passfile=[REDACTED]",
            ),
            (
                "host=db user=me@corp dbname=x",
                "host=db user=me@corp dbname=x",
            ),
            ("host=x password=", "host=x password=[REDACTED]"),
        ] {
            assert_eq!(redact_connection_string(input), expected, "{input}");
        }
    }

    #[test]
    fn known_values_are_scrubbed_wherever_they_appear() {
        assert_eq!(
            scrub_values("auth failed for pw-123 (pw-123)", ["pw-123", ""]),
            "auth failed for [REDACTED] ([REDACTED])"
        );
        assert_eq!(scrub_values("nothing here", ["secret"]), "nothing here");
    }

    #[test]
    fn non_ascii_text_is_cut_on_char_boundaries() {
        let s = "redis://üser:pässwörd@höst/0?password=gehéim&db=é";
        assert_eq!(
            redact_connection_string(s),
            "redis://[REDACTED]@höst/0?password=[REDACTED]&db=é"
        );
        assert_eq!(
            redact_connection_string("rédis:/u:pässwörd@h"),
            "[REDACTED]@h"
        );
    }
}
