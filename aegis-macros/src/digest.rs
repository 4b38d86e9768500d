//! The code digest of an `#[aegis]` function: what node cache keys cover of
//! the node's code (`AegisNodeFn::CODE_VERSION`), computed at compile time
//! from the function's tokens.
//!
//! It covers the signature and the body as tokens, so editing either changes
//! it, and nothing that is not code: comments are not tokens, doc comments
//! (`#[doc = ..]` attributes, at any depth) are dropped, and layout is not
//! read. The tokens are not hashed through `TokenStream`'s `Display`, whose
//! spacing differs between compiler versions (newer ones print the source's
//! own spacing): each token is encoded by its kind and text, and a
//! punctuation mark's spacing only where it tells two operators apart (`&&`
//! from `& &`), never where it is layout (`x:&T` and `x: &T` agree). A
//! trailing comma, which rustfmt adds when it breaks a list over lines, is
//! dropped where it cannot matter: after the last of several items, or in
//! brackets and braces (`(x,)` stays a one-element tuple). A reformat that
//! changes other tokens (rustfmt wrapping a long match arm in braces) is a
//! change: it costs a cache miss, never a stale hit.
//!
//! It does not see code the function calls: a change to a helper reaches
//! the cache only through the function's own tokens.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use sha2::{Digest, Sha256};

/// The domain of the digest's stream: a digest made for anything else
/// never coincides with one.
const DOMAIN: &[u8] = b"aegis-macros/code-digest/v1";

/// How many bytes of the SHA-256 the digest keeps (32 hex digits): it only
/// tells one version of a node's code from another.
const DIGEST_BYTES: usize = 16;

/// The digest of `tokens` (an `#[aegis]` function as written, without the
/// attribute itself), as lowercase hex.
pub(crate) fn code_digest(tokens: TokenStream) -> String {
    let mut sha = Sha256::new();
    feed_bytes(&mut sha, DOMAIN);
    feed(&mut sha, tokens, Delimiter::None);
    sha.finalize()[..DIGEST_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn feed_bytes(sha: &mut Sha256, bytes: &[u8]) {
    sha.update((bytes.len() as u64).to_le_bytes());
    sha.update(bytes);
}

/// Feeds each token tree of `tokens` (the inside of a group delimited by
/// `delimiter`), tagged by kind, skipping doc attributes and a trailing
/// comma that cannot matter; groups are fed with their delimiters,
/// recursively.
fn feed(sha: &mut Sha256, tokens: TokenStream, delimiter: Delimiter) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut at = 0;
    while let Some(tree) = trees.get(at) {
        if let Some(len) = doc_attribute_at(&trees, at) {
            at += len;
            continue;
        }
        if at + 1 == trees.len() && is_comma(tree) {
            let several = trees[..at].iter().any(is_comma);
            if several || matches!(delimiter, Delimiter::Bracket | Delimiter::Brace) {
                break;
            }
        }
        match tree {
            TokenTree::Group(group) => {
                let open = match group.delimiter() {
                    Delimiter::Parenthesis => b'(',
                    Delimiter::Bracket => b'[',
                    Delimiter::Brace => b'{',
                    // An invisible group, as macro_rules makes around `$x`.
                    Delimiter::None => b'0',
                };
                sha.update([b'g', open]);
                feed(sha, group.stream(), group.delimiter());
                sha.update([b'e']);
            }
            TokenTree::Ident(ident) => {
                sha.update([b'i']);
                feed_bytes(sha, ident.to_string().as_bytes());
            }
            TokenTree::Literal(literal) => {
                sha.update([b'l']);
                feed_bytes(sha, literal.to_string().as_bytes());
            }
            TokenTree::Punct(punct) => {
                let next = match trees.get(at + 1) {
                    Some(TokenTree::Punct(next)) => Some(next.as_char()),
                    _ => None,
                };
                let joint = punct.spacing() == Spacing::Joint
                    && next.is_some_and(|next| glues(punct.as_char(), next));
                let mut buf = [0u8; 4];
                sha.update([b'p', u8::from(joint)]);
                feed_bytes(sha, punct.as_char().encode_utf8(&mut buf).as_bytes());
            }
        }
        at += 1;
    }
}

fn is_comma(tree: &TokenTree) -> bool {
    matches!(tree, TokenTree::Punct(p) if p.as_char() == ',')
}

/// When `trees[at..]` opens with a doc attribute (`#[doc ..]` or
/// `#![doc ..]`: a doc comment as the compiler hands it over), how many
/// trees it spans.
fn doc_attribute_at(trees: &[TokenTree], at: usize) -> Option<usize> {
    let Some(TokenTree::Punct(pound)) = trees.get(at) else {
        return None;
    };
    if pound.as_char() != '#' {
        return None;
    }
    let inner = matches!(trees.get(at + 1), Some(TokenTree::Punct(bang)) if bang.as_char() == '!');
    let bracket = at + 1 + usize::from(inner);
    let Some(TokenTree::Group(group)) = trees.get(bracket) else {
        return None;
    };
    let is_doc = group.delimiter() == Delimiter::Bracket
        && matches!(group.stream().into_iter().next(), Some(TokenTree::Ident(name)) if name == "doc");
    is_doc.then_some(bracket - at + 1)
}

/// Whether `first` directly followed by `second` forms another operator
/// than the two apart (`&&` is not `& &`, `->` not `- >`): the pairs that
/// begin one of Rust's multi-character punctuation tokens.
fn glues(first: char, second: char) -> bool {
    matches!(
        (first, second),
        ('&', '&' | '=')
            | ('|', '|' | '=')
            | (':', ':')
            | ('-', '>' | '=')
            | ('=', '>' | '=')
            | ('!', '=')
            | ('<', '=' | '<' | '-')
            | ('>', '=' | '>')
            | ('+' | '*' | '/' | '%' | '^', '=')
            | ('.', '.' | '=')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(source: &str) -> String {
        let item: syn::ItemFn = syn::parse_str(source).unwrap_or_else(|e| panic!("{e}: {source}"));
        code_digest(quote::quote!(#item))
    }

    fn raw(source: &str) -> String {
        code_digest(source.parse().unwrap_or_else(|e| panic!("{e:?}: {source}")))
    }

    const ANSWER: &str = r#"
        async fn answer(state: &Battlefield, _: &NodeContext) -> Result<StateDelta, StateNodeError> {
            let q = state.get("question").and_then(|v| v.as_str()).unwrap_or("?");
            let mut delta = StateDelta::new();
            delta.set("answer", format!("v1: {q}"))?;
            Ok(delta)
        }
    "#;

    #[test]
    fn is_32_hex_digits_and_deterministic() {
        let d = digest(ANSWER);
        assert_eq!(d.len(), 32);
        assert!(
            d.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(d, digest(ANSWER));
    }

    #[test]
    fn formatting_comments_and_doc_comments_do_not_change_it() {
        let reformatted = r#"
        /// Answers the question.
        ///
        /// With a doc comment that says so.
        async fn answer(
            state : &Battlefield,
            _ : &NodeContext,
        ) -> Result<StateDelta,StateNodeError>
        {
            // A comment.
            let q = state.get( "question" )
                .and_then(|v| v.as_str())   /* and a block comment */
                .unwrap_or("?");
            #[doc = "a doc attribute on a statement's item"]
            fn helper() {}
            let mut delta = StateDelta::new();
            delta.set("answer", format!("v1: {q}"))?;
            Ok(delta)
        }
        "#;
        // The helper is code: without it, the digest differs.
        let with_helper =
            ANSWER.replace("let mut delta", "fn helper() {}\n            let mut delta");
        assert_eq!(digest(reformatted), digest(&with_helper));
        assert_ne!(digest(&with_helper), digest(ANSWER));
        // Inner doc comments too, and raw tokens (not through syn) alike.
        let inner = ANSWER.replacen('{', "{\n            //! Inner docs.\n", 1);
        assert_eq!(digest(&inner), digest(ANSWER));
        assert_eq!(raw(&inner), raw(ANSWER));
        assert_eq!(raw("fn f(x:&'a T) {}"), raw("fn f(x: &'a T) {}"));
        // rustfmt's trailing commas.
        assert_eq!(raw("fn f(a: A, b: B,) {}"), raw("fn f(a: A, b: B) {}"));
        assert_eq!(raw("fn f() { [1,] }"), raw("fn f() { [1] }"));
        assert_eq!(
            raw("fn f() { match x { A => 1, B => 2, } }"),
            raw("fn f() { match x { A => 1, B => 2 } }")
        );
        assert_eq!(
            raw("fn f() { m!(a , b:&c) }"),
            raw("fn f() { m!(a, b: &c) }")
        );
    }

    #[test]
    fn a_changed_body_or_signature_changes_it() {
        let base = digest(ANSWER);
        for changed in [
            ANSWER.replace("v1: {q}", "v2: {q}"),
            ANSWER.replace("\"?\"", "\"unknown\""),
            ANSWER.replace("_: &NodeContext", "ctx: &NodeContext"),
            ANSWER.replace("async fn answer", "async fn answer_v2"),
            ANSWER.replace(
                "Result<StateDelta, StateNodeError>",
                "Result<Directive, StateNodeError>",
            ),
            ANSWER.replace("Ok(delta)", "Ok(delta.clone())"),
        ] {
            assert_ne!(digest(&changed), base, "{changed}");
        }
    }

    #[test]
    fn a_one_element_tuple_keeps_its_comma() {
        assert_ne!(raw("fn f() { (x,) }"), raw("fn f() { (x) }"));
        assert_ne!(raw("fn f() -> (T,) {}"), raw("fn f() -> (T) {}"));
    }

    #[test]
    fn spacing_that_changes_the_operator_changes_it() {
        assert_ne!(raw("fn f() { a && b }"), raw("fn f() { a & &b }"));
        assert_ne!(raw("fn f() { a || b }"), raw("fn f() { a | |b }"));
        assert_ne!(raw("fn f() { m!(a->b) }"), raw("fn f() { m!(a- >b) }"));
        assert_eq!(raw("fn f() { a&&b }"), raw("fn f() { a && b }"));
    }
}
