//! An API key that never reaches `Debug`, `Display` or logs.

use std::fmt;

/// A provider credential. `Debug` prints a fixed placeholder; the value is
/// only read to build a request header (marked sensitive).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        ApiKey(key)
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        ApiKey(key.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_key() {
        let k = ApiKey::new("sk-live-very-secret");
        assert_eq!(format!("{k:?}"), "ApiKey([REDACTED])");
        assert_eq!(k.expose(), "sk-live-very-secret");
    }
}
