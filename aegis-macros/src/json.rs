//! JSON literal values, for schema defaults and `absorb(..)` writes:
//! strings, integers, floats (optionally negative), `true`, `false`,
//! `null`, `[..]` arrays and `{ "key": value }` objects.
//!
//! Literals rather than arbitrary expressions, so the generated code builds
//! a `serde_json::Value` that cannot fail and needs no `serde_json` in the
//! user's crate.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::{Lit, Token, braced, bracketed};

/// A parsed JSON value and where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Json {
    pub(crate) span: Span,
    pub(crate) kind: JsonKind,
}

#[derive(Debug, Clone)]
pub(crate) enum JsonKind {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

const EXPECTED: &str = "expected a JSON literal: a string, a number, `true`, `false`, `null`, `[..]` or `{ \"key\": value }`";

impl Parse for Json {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let span = input.span();
        let kind = if input.peek(syn::token::Bracket) {
            let content;
            bracketed!(content in input);
            let items = content.parse_terminated(Json::parse, Token![,])?;
            JsonKind::Array(items.into_iter().collect())
        } else if input.peek(syn::token::Brace) {
            let content;
            braced!(content in input);
            let mut entries = Vec::new();
            while !content.is_empty() {
                let key = if content.peek(syn::LitStr) {
                    content.parse::<syn::LitStr>()?.value()
                } else {
                    content
                        .parse::<syn::Ident>()
                        .map_err(|e| {
                            syn::Error::new(
                                e.span(),
                                "expected an object key: a string or an identifier",
                            )
                        })?
                        .to_string()
                };
                content.parse::<Token![:]>()?;
                entries.push((key, content.parse()?));
                if content.is_empty() {
                    break;
                }
                content.parse::<Token![,]>()?;
            }
            JsonKind::Object(entries)
        } else if input.peek(Token![-]) {
            input.parse::<Token![-]>()?;
            match input.parse::<Lit>()? {
                Lit::Int(i) => {
                    JsonKind::Int(i.base10_parse::<i64>().map(|n| -n).map_err(|_| {
                        syn::Error::new(i.span(), "this integer does not fit in an i64")
                    })?)
                }
                Lit::Float(f) => JsonKind::Float(-f.base10_parse::<f64>()?),
                other => return Err(syn::Error::new(other.span(), "expected a number after `-`")),
            }
        } else if input.peek(syn::Ident) {
            let ident: syn::Ident = input.parse()?;
            match ident.to_string().as_str() {
                "null" => JsonKind::Null,
                "true" => JsonKind::Bool(true),
                "false" => JsonKind::Bool(false),
                _ => return Err(syn::Error::new(ident.span(), EXPECTED)),
            }
        } else {
            match input
                .parse::<Lit>()
                .map_err(|e| syn::Error::new(e.span(), EXPECTED))?
            {
                Lit::Str(s) => JsonKind::Str(s.value()),
                Lit::Bool(b) => JsonKind::Bool(b.value),
                Lit::Int(i) => match i.base10_parse::<i64>() {
                    Ok(n) => JsonKind::Int(n),
                    Err(_) => JsonKind::UInt(i.base10_parse::<u64>()?),
                },
                Lit::Float(f) => JsonKind::Float(f.base10_parse()?),
                other => return Err(syn::Error::new(other.span(), EXPECTED)),
            }
        };
        Ok(Json { span, kind })
    }
}

impl Json {
    /// An expression of type `Value`, through the runtime path `private`.
    pub(crate) fn to_value_tokens(&self, private: &TokenStream) -> TokenStream {
        let span = self.span;
        match &self.kind {
            JsonKind::Null => quote_spanned!(span=> #private::Value::Null),
            JsonKind::Bool(b) => quote_spanned!(span=> #private::Value::Bool(#b)),
            JsonKind::Int(n) => {
                let lit = proc_macro2::Literal::i64_suffixed(*n);
                quote_spanned!(span=> #private::Value::from(#lit))
            }
            JsonKind::UInt(n) => {
                let lit = proc_macro2::Literal::u64_suffixed(*n);
                quote_spanned!(span=> #private::Value::from(#lit))
            }
            JsonKind::Float(f) => {
                let lit = proc_macro2::Literal::f64_suffixed(*f);
                quote_spanned!(span=> #private::Value::from(#lit))
            }
            JsonKind::Str(s) => quote_spanned!(span=> #private::Value::from(#s)),
            JsonKind::Array(items) => {
                let items = items.iter().map(|i| i.to_value_tokens(private));
                quote!(#private::array(::std::vec![#(#items),*]))
            }
            JsonKind::Object(entries) => {
                let entries = entries.iter().map(|(k, v)| {
                    let v = v.to_value_tokens(private);
                    quote!((#k, #v))
                });
                quote!(#private::object(::std::vec![#(#entries),*]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> syn::Result<Json> {
        syn::parse_str(s)
    }

    #[test]
    fn parses_every_literal_form() {
        assert!(matches!(parse("null").unwrap().kind, JsonKind::Null));
        assert!(matches!(parse("true").unwrap().kind, JsonKind::Bool(true)));
        assert!(matches!(parse("-3").unwrap().kind, JsonKind::Int(-3)));
        assert!(matches!(
            parse("18446744073709551615").unwrap().kind,
            JsonKind::UInt(u64::MAX)
        ));
        assert!(matches!(parse("-1.5").unwrap().kind, JsonKind::Float(f) if f == -1.5));
        assert!(matches!(parse("\"hi\"").unwrap().kind, JsonKind::Str(ref s) if s == "hi"));
        let JsonKind::Array(items) = parse("[1, \"a\", [], {}]").unwrap().kind else {
            panic!("not an array")
        };
        assert_eq!(items.len(), 4);
        let JsonKind::Object(entries) = parse("{ \"a\": 1, b: [true] }").unwrap().kind else {
            panic!("not an object")
        };
        assert_eq!(entries[0].0, "a");
        assert_eq!(entries[1].0, "b");
    }

    #[test]
    fn rejects_expressions() {
        for bad in ["foo", "1 + 2", "vec![]", "'c'", "-\"a\"", "{ 1: 2 }"] {
            assert!(
                parse(bad).is_err(),
                "{bad} should not parse as a JSON literal"
            );
        }
    }

    #[test]
    fn expands_to_value_constructors() {
        let p = quote!(::aegis::__private);
        let tokens = parse("[1, null]").unwrap().to_value_tokens(&p).to_string();
        assert!(tokens.contains("array"), "{tokens}");
        assert!(tokens.contains("1i64"), "{tokens}");
        assert!(tokens.contains("Value :: Null"), "{tokens}");
    }
}
