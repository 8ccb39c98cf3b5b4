//! Guards the actions (every method but `GET` and `HEAD`): refused in
//! read-only mode, refused when the browser says the request comes from
//! another site (`Sec-Fetch-Site`, `Origin`), and refused without the
//! per-process CSRF token that `/api/overview` hands the page (header
//! `x-csrf-token`). A cookie alone, sent by the browser with a forged
//! cross-site form, therefore never suffices.
//!
//! The producer API under `/api/v1` is for programs, which cannot fetch
//! the token: its writes need `Content-Type: application/json` instead. A
//! browser sends that type to another origin only after a CORS preflight,
//! which the dashboard never grants, so a forged form or `fetch` from
//! another site cannot reach it; and `auth::check` takes its bearer token
//! from the `Authorization` header only, never from the page's cookie.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::host::AskedHost;
use super::state::App;

/// The header that carries the CSRF token.
pub(crate) const HEADER: &str = "x-csrf-token";

/// Where the producer API lives, relative to the dashboard's mount point.
pub(crate) const PRODUCER_API: &str = "/api/v1/";

pub(crate) async fn check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    let forbidden = StatusCode::FORBIDDEN;
    let refused = if app.read_only {
        Some((forbidden, "read-only"))
    } else if cross_site(req.headers(), asked_host(&req)) {
        Some((forbidden, "cross-site"))
    } else if req.uri().path().starts_with(PRODUCER_API) {
        let why = "content-type must be application/json";
        (!is_json(req.headers())).then_some((StatusCode::UNSUPPORTED_MEDIA_TYPE, why))
    } else if !token_matches(req.headers(), &app.csrf) {
        Some((forbidden, "csrf"))
    } else {
        None
    };
    match refused {
        Some((status, why)) => (status, axum::Json(serde_json::json!({ "error": why }))).into_response(),
        None => next.run(req).await,
    }
}

/// The host the browser asked for, as `host::check` found it, else `Host`.
fn asked_host(req: &Request) -> Option<&str> {
    match req.extensions().get::<AskedHost>() {
        Some(AskedHost(h)) => Some(h),
        None => req.headers().get(header::HOST).and_then(|v| v.to_str().ok()),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

fn token_matches(headers: &HeaderMap, csrf: &str) -> bool {
    headers
        .get(HEADER)
        .is_some_and(|v| bool::from(v.as_bytes().ct_eq(csrf.as_bytes())))
}

/// Whether the browser says another site sent it: `Sec-Fetch-Site` other
/// than same-origin (or none: typed by the user), or an `Origin` whose
/// host is not the host asked for (`asked`). Clients that send neither
/// (curl, scripts) are not browsers acting for another site.
fn cross_site(headers: &HeaderMap, asked: Option<&str>) -> bool {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if !matches!(site, "same-origin" | "none") {
            return true;
        }
    }
    match text(header::ORIGIN) {
        None => false,
        Some(origin) => {
            let origin_host = origin.split_once("://").map(|(_, h)| h);
            origin_host.is_none() || origin_host != asked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn cross_site_requests_are_recognised() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert!(!cross_site(&h(&[]), None));
        assert!(!cross_site(&h(&[("sec-fetch-site", "same-origin")]), None));
        assert!(cross_site(&h(&[("sec-fetch-site", "cross-site")]), None));
        assert!(cross_site(&h(&[("sec-fetch-site", "same-site")]), None));
        assert!(!cross_site(&h(&[("origin", "http://a:8080")]), Some("a:8080")));
        assert!(cross_site(&h(&[("origin", "http://evil")]), Some("a:8080")));
        assert!(cross_site(&h(&[("origin", "null")]), Some("a:8080")));
        assert!(token_matches(&h(&[("x-csrf-token", "abc")]), "abc"));
        assert!(!token_matches(&h(&[("x-csrf-token", "abd")]), "abc"));
        assert!(!token_matches(&h(&[]), "abc"));
        assert!(is_json(&h(&[("content-type", "application/json; charset=utf-8")])));
        assert!(!is_json(&h(&[("content-type", "text/plain")])));
        assert!(!is_json(&h(&[])));
    }
}
