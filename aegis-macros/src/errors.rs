//! Error accumulation: every problem found is kept with its span and all are
//! reported together, as serde_derive's `Ctxt` does.

use proc_macro2::Span;
use std::fmt::Display;

/// Collects errors; [`Errors::finish`] combines them into one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
    count: usize,
}

impl Errors {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.count += error.clone().into_iter().count();
        match &mut self.combined {
            Some(all) => all.combine(error),
            None => self.combined = Some(error),
        }
    }

    pub(crate) fn error(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Adds darling's errors, reworded so each says what to write instead.
    pub(crate) fn darling(&mut self, error: darling::Error) {
        for e in error.flatten() {
            let span = e.span();
            let message = reword(&syn::Error::from(e).to_string());
            self.error(span, message);
        }
    }

    /// Keeps the value of `Ok`, records the error of `Err`.
    pub(crate) fn syn<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.push(e);
                None
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// How many errors were recorded.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.combined {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// darling's messages name the problem; ours also say what to write.
fn reword(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("Duplicate field `") {
        let key = rest.trim_end_matches('`');
        return format!("`{key}` is given twice: keep only one `{key}`");
    }
    for (prefix, noun) in [("Unknown field: `", "key"), ("Unknown value: `", "value")] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        if let Some((key, hint)) = rest.split_once('`') {
            let hint = hint
                .trim_start_matches(". ")
                .replace("Did you mean", "did you mean")
                .replace("Available values:", "expected one of");
            return if hint.is_empty() {
                format!("unknown {noun} `{key}`")
            } else {
                format!("unknown {noun} `{key}`: {hint}")
            };
        }
    }
    message.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewords_darling_messages() {
        assert_eq!(
            reword("Duplicate field `max`"),
            "`max` is given twice: keep only one `max`"
        );
        assert_eq!(
            reword("Unknown field: `retyr`. Did you mean `retry`?"),
            "unknown key `retyr`: did you mean `retry`?"
        );
        assert_eq!(
            reword("Unknown field: `zz`. Available values: `run`, `idle`"),
            "unknown key `zz`: expected one of `run`, `idle`"
        );
        assert_eq!(reword("Unknown field: `zz`"), "unknown key `zz`");
        assert_eq!(
            reword("Unknown value: `transiet`. Did you mean `transient`?"),
            "unknown value `transiet`: did you mean `transient`?"
        );
        assert_eq!(reword("something else"), "something else");
    }

    #[test]
    fn accumulates_every_error() {
        let mut errors = Errors::new();
        assert!(errors.is_empty());
        errors.error(Span::call_site(), "one");
        errors.error(Span::call_site(), "two");
        let all = errors.finish().unwrap_err();
        let messages: Vec<String> = all.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["one", "two"]);
    }
}
