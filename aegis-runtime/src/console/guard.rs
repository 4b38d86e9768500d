//! Who may use the console: a bearer token when one is configured (and
//! loopback only when none is), forms that only this console's pages can
//! submit (a per-process token in a hidden field, and the `Origin` the
//! browser sends), and `Host` names a rebinding attack cannot forge.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

use super::app::App;

/// The cookie a browser keeps the bearer token in after `/login`.
pub(crate) const TOKEN_COOKIE: &str = "aegis_console_token";

/// Compares two secrets in time that depends on their lengths only.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes as hex: the per-process form token.
pub(crate) fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bearer token the request carries: its `Authorization` header, or
/// the cookie `/login` set.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value)
}

/// Whether `host` (a `Host` header) names the console's own loopback
/// address: `127.0.0.1:PORT`, `[::1]:PORT` or `localhost:PORT`. A page of
/// another site that a rebinding DNS points at 127.0.0.1 sends its own
/// name, and is refused.
pub(crate) fn is_own_host(host: &str, local: SocketAddr) -> bool {
    let port = local.port();
    [
        local.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ]
    .iter()
    .any(|h| h.eq_ignore_ascii_case(host))
}

/// Whether a POST's `Origin` (when the client sent one) is this console as
/// the browser reached it (`http://` + its `Host`).
pub(crate) fn origin_matches(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        // Browsers send Origin on every form POST; a client without one
        // (curl, a script) still needs the form token.
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(origin), Some(host)) => origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host)),
        _ => false,
    }
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{why}\n"),
    )
        .into_response()
}

/// Runs before every handler: the token (when configured), the `Host`
/// (when not), and the `Origin` of a POST. The form token is checked by
/// each action with the form it parsed.
pub(crate) async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    match &app.token {
        Some(token) => {
            let login = request.uri().path() == "/login";
            let ok = presented_token(headers)
                .is_some_and(|t| same_secret(t.as_bytes(), token.as_bytes()));
            if !ok && !login {
                let mut response = refuse(
                    StatusCode::UNAUTHORIZED,
                    "this console needs its bearer token: send `Authorization: Bearer <token>`, or sign in at /login",
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                return response;
            }
        }
        None => {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
            if !host.is_some_and(|h| is_own_host(h, app.local)) {
                return refuse(
                    StatusCode::MISDIRECTED_REQUEST,
                    "unexpected Host: this console answers only to its loopback address",
                );
            }
        }
    }
    if request.method() == Method::POST && !origin_matches(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "cross-site form submission refused (Origin does not match Host)",
        );
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }

    #[test]
    fn form_tokens_are_random_and_long() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert_eq!(presented_token(&h), Some("s3cret"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; aegis_console_token=s3cret"),
        );
        assert_eq!(presented_token(&h), Some("s3cret"));
        assert_eq!(presented_token(&HeaderMap::new()), None);
    }

    #[test]
    fn only_the_own_loopback_names_are_hosts() {
        let local: SocketAddr = "127.0.0.1:8089".parse().expect("address");
        assert!(is_own_host("127.0.0.1:8089", local));
        assert!(is_own_host("LOCALHOST:8089", local));
        assert!(!is_own_host("evil.example:8089", local));
        assert!(!is_own_host("127.0.0.1:9999", local));
    }

    #[test]
    fn a_foreign_origin_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8089"));
        assert!(origin_matches(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8089"),
        );
        assert!(origin_matches(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!origin_matches(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!origin_matches(&h));
    }
}
