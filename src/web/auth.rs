//! Who may use the dashboard: [`Auth`], checked on every route before
//! anything else runs.
//!
//! A browser cannot add a bearer header to a page load, so a bearer token
//! is also taken once from the page's `?token=` query: the reply redirects
//! to the same page without it and sets an `HttpOnly`, `SameSite=Strict`
//! cookie holding the token, which the browser then sends with every
//! request under the dashboard's path. The producer API (`/api/v1`) takes
//! the token from the `Authorization` header only: a cookie that a browser
//! adds on its own must not authorise a program's writes.

use std::sync::Arc;

use axum::extract::{OriginalUri, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

/// The cookie that carries a bearer token for a browser.
const COOKIE: &str = "delayqueue_token";

/// How the dashboard checks who is asking, on every route (pages, assets,
/// API, metrics). Secrets are compared in constant time.
///
/// ```
/// use delayqueue::web::Auth;
/// let open = Auth::None;
/// let token = Auth::Bearer("secret".into());
/// let basic = Auth::Basic { user: "ops".into(), password: "secret".into() };
/// # let _ = (open, token, basic);
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Auth {
    /// Anyone who reaches it: for a loopback address or behind your own auth.
    #[default]
    None,
    /// `Authorization: Bearer <token>`; browsers open the dashboard once
    /// with `?token=<token>` and keep it in a cookie.
    Bearer(String),
    /// HTTP basic auth: the browser asks for the user and password.
    Basic {
        /// The user name.
        user: String,
        /// Its password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    // Never print a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
            Auth::Basic { user, .. } => f.debug_struct("Basic").field("user", user).finish_non_exhaustive(),
        }
    }
}

/// Who made the request, as the handlers see it (`None`: no auth, or a token).
#[derive(Debug, Clone, Default)]
pub(crate) struct User(pub Option<String>);

impl User {
    /// The name for logs: the basic-auth user, else `-`.
    pub(crate) fn log_name(&self) -> &str {
        self.0.as_deref().unwrap_or("-")
    }
}

impl Auth {
    /// Fails when a secret is empty: an unset variable passed as the token
    /// must not open the dashboard to whoever sends an empty one.
    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        let empty = match self {
            Auth::None => None,
            Auth::Bearer(token) => token.is_empty().then_some("the bearer token"),
            Auth::Basic { user, password } => {
                (user.is_empty() || password.is_empty()).then_some("the basic auth user and password")
            }
        };
        match empty {
            Some(what) => Err(crate::Error::InvalidArgument(format!("{what} must not be empty"))),
            None => Ok(()),
        }
    }
}

/// Whether `given` is the secret `expected`; never for an empty secret.
fn same(given: &str, expected: &str) -> bool {
    !expected.is_empty() & bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// Lets the request through when it authenticates; else 401.
pub(crate) async fn check(
    State(auth): State<Arc<Auth>>,
    OriginalUri(uri): OriginalUri,
    mut req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let user = match &*auth {
        Auth::None => Some(User(None)),
        Auth::Basic { user, password } => basic(headers)
            .filter(|(u, p)| same(u, user) & same(p, password))
            .map(|(u, _)| User(Some(u))),
        Auth::Bearer(token) => {
            let cookie_ok = !req.uri().path().starts_with(super::csrf::PRODUCER_API);
            if bearer(headers, cookie_ok).is_some_and(|t| same(t, token)) {
                Some(User(None))
            } else if query_token(req.uri().query()).is_some_and(|t| same(&t, token)) {
                return into_cookie(req.method(), uri.path(), req.uri().path(), token);
            } else {
                None
            }
        }
    };
    match user {
        Some(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        None => refused(&auth),
    }
}

fn refused(auth: &Auth) -> Response {
    let mut res = (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({"error": "unauthorized"})),
    )
        .into_response();
    if let Auth::Basic { .. } = auth {
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"delayqueue\", charset=\"UTF-8\""),
        );
    }
    res
}

/// A valid `?token=`: redirects to the same page without it (so the token
/// leaves the address bar and history) and sets the cookie, scoped to the
/// dashboard's mount path.
fn into_cookie(method: &Method, full_path: &str, own_path: &str, token: &str) -> Response {
    if method != Method::GET {
        return (StatusCode::METHOD_NOT_ALLOWED, "the token query is for page loads").into_response();
    }
    // The path the dashboard is mounted at: the full path minus the
    // dashboard's own part.
    let mount = full_path
        .strip_suffix(own_path)
        .or_else(|| full_path.strip_suffix(own_path.trim_end_matches('/')))
        .unwrap_or("")
        .trim_end_matches('/');
    let cookie_path = if mount.is_empty() { "/" } else { mount };
    let cookie = format!("{COOKIE}={token}; Path={cookie_path}; HttpOnly; SameSite=Strict");
    let (Ok(cookie), Ok(location)) = (HeaderValue::from_str(&cookie), HeaderValue::from_str(full_path)) else {
        return (StatusCode::BAD_REQUEST, "the token cannot be a cookie").into_response();
    };
    (
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, location)],
    )
        .into_response()
}

/// The bearer token of the `Authorization` header, else (`cookie_ok`) of the cookie.
fn bearer(headers: &HeaderMap, cookie_ok: bool) -> Option<&str> {
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    from_header.or_else(|| {
        cookie_ok.then_some(())?;
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
    })
}

/// `?token=` of the query, percent-decoded.
fn query_token(query: Option<&str>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Q {
        token: Option<String>,
    }
    let q: axum::extract::Query<Q> = axum::extract::Query::try_from_uri(&format!("/?{}", query?).parse().ok()?).ok()?;
    q.0.token
}

/// User and password of a basic `Authorization` header.
fn basic(headers: &HeaderMap) -> Option<(String, String)> {
    let encoded = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_read_from_headers_cookies_and_query() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic b3BzOnNlOmNyZXQ="),
        );
        assert_eq!(basic(&h), Some(("ops".into(), "se:cret".into())));
        assert_eq!(bearer(&h, true), None);
        h.insert(header::COOKIE, HeaderValue::from_static("a=b; delayqueue_token=t1"));
        assert_eq!(bearer(&h, true), Some("t1"));
        assert_eq!(bearer(&h, false), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t2"));
        assert_eq!(bearer(&h, false), Some("t2"));
        assert_eq!(query_token(Some("x=1&token=a%20b")), Some("a b".into()));
        assert_eq!(query_token(None), None);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab") && !same("", ""));
        assert!(Auth::Bearer(String::new()).validate().is_err());
        for (user, password) in [("", "p"), ("u", "")] {
            let basic = Auth::Basic {
                user: user.into(),
                password: password.into(),
            };
            assert!(basic.validate().is_err());
        }
        assert!(Auth::None.validate().is_ok() && Auth::Bearer("t".into()).validate().is_ok());
        assert_eq!(format!("{:?}", Auth::Bearer("s".into())), "Bearer(***)");
    }
}
