//! Secrets removed by value: the credentials an adapter was configured with
//! (and any the user registers), whatever their shape.
//!
//! Pattern-based redaction ([`redact_secrets`]) only catches credentials that
//! look like one (`sk-...`, `Bearer ...`, `api_key=...`). A 32-hex key with
//! no prefix, a vLLM `--api-key` or a proxy token echoed bare in an error
//! body looks like any other word, so the values themselves are removed
//! too, *before* the text is bounded (a bound first could cut a secret and
//! leave its head behind, no longer equal to the value).

use std::fmt;
use std::sync::Arc;

use super::{REDACTED, bound_excerpt, redact_secrets};

/// A set of secret values removed as exact substrings from every text that
/// leaves an LLM adapter (error excerpts, parse errors, stream error
/// envelopes, a fallback chain's summaries and hop log).
///
/// Each secret is also removed in the escaped forms a provider or serde may
/// quote it in (JSON string escapes, Rust `Debug` escapes). Empty secrets are
/// ignored. `Debug` shows only how many secrets the set holds. Cloning is
/// cheap (the values are shared).
///
/// ```
/// use aegis_runtime::error::KnownSecrets;
/// let secrets = KnownSecrets::new().with("0123456789abcdef0123456789abcdef");
/// assert_eq!(
///     secrets.redact_excerpt("bad key 0123456789abcdef0123456789abcdef"),
///     "bad key [REDACTED]"
/// );
/// assert_eq!(format!("{secrets:?}"), "KnownSecrets(1 secret)");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KnownSecrets {
    /// The values and their escaped forms, longest first, so a secret that
    /// contains another is removed whole.
    needles: Arc<[String]>,
    /// How many secrets were registered (for `Debug`).
    count: usize,
}

impl fmt::Debug for KnownSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.count == 1 { "" } else { "s" };
        write!(f, "KnownSecrets({} secret{s})", self.count)
    }
}

impl KnownSecrets {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set with `secret` added (an empty string is ignored).
    pub fn with(self, secret: impl AsRef<str>) -> Self {
        let secret = secret.as_ref();
        if secret.is_empty() {
            return self;
        }
        let mut needles: Vec<String> = self.needles.to_vec();
        needles.push(secret.to_string());
        // serde_json's messages and JSON bodies quote `"` and `\`, Debug
        // output escapes them (and controls) too.
        if let Ok(json) = serde_json::to_string(secret) {
            needles.push(json[1..json.len() - 1].to_string());
        }
        let debug = format!("{secret:?}");
        needles.push(debug[1..debug.len() - 1].to_string());
        Self::from_needles(needles, self.count + 1)
    }

    /// The union of this set and `other`.
    pub fn union(&self, other: &KnownSecrets) -> Self {
        if other.count == 0 {
            return self.clone();
        }
        let mut needles = self.needles.to_vec();
        needles.extend(other.needles.iter().cloned());
        Self::from_needles(needles, self.count + other.count)
    }

    fn from_needles(mut needles: Vec<String>, count: usize) -> Self {
        needles.retain(|n| !n.is_empty());
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        needles.dedup();
        KnownSecrets {
            needles: needles.into(),
            count,
        }
    }

    /// Whether no secret is registered.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `text` with every occurrence of a known secret replaced by
    /// [`REDACTED`]; nothing else changes.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for needle in self.needles.iter() {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), REDACTED);
            }
        }
        out
    }

    /// Known secrets removed, then credential-shaped text
    /// ([`redact_secrets`]).
    pub fn redact(&self, text: &str) -> String {
        redact_secrets(&self.scrub(text))
    }

    /// Known secrets removed, credential-shaped text redacted, then bounded
    /// ([`bound_excerpt`]): what provider text passes through before it
    /// enters an error.
    pub fn redact_excerpt(&self, text: &str) -> String {
        bound_excerpt(&self.redact(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_each_value_and_its_escaped_forms() {
        let s = KnownSecrets::new()
            .with("abc\"def\\ghi")
            .with("")
            .with("0123456789abcdef");
        assert_eq!(s.scrub(r#"x abc\"def\\ghi y"#), "x [REDACTED] y");
        assert_eq!(s.scrub("x abc\"def\\ghi y"), "x [REDACTED] y");
        assert_eq!(
            s.scrub("k=0123456789abcdef0123456789abcdef"),
            "k=[REDACTED][REDACTED]"
        );
        assert_eq!(format!("{s:?}"), "KnownSecrets(2 secrets)");
    }

    #[test]
    fn a_longer_secret_containing_a_shorter_one_goes_whole() {
        let s = KnownSecrets::new().with("tok").with("tokenvalue-99");
        assert_eq!(
            s.scrub("a tokenvalue-99 b tok"),
            "a [REDACTED] b [REDACTED]"
        );
        let u = KnownSecrets::new()
            .with("tok")
            .union(&KnownSecrets::new().with("zzz"));
        assert_eq!(u.scrub("tok zzz"), "[REDACTED] [REDACTED]");
        assert!(KnownSecrets::new().is_empty());
    }

    #[test]
    fn bounds_after_removing_so_no_head_survives_the_cut() {
        let key = "f".repeat(40);
        let s = KnownSecrets::new().with(&key);
        let text = format!("{}{key}", "x".repeat(500));
        let out = s.redact_excerpt(&text);
        assert!(!out.contains("ffffff"), "{out}");
    }
}
