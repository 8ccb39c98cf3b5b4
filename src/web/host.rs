//! Guards against DNS rebinding: a page of the attacker's site whose name
//! then resolves to the dashboard's address is, to the browser, of the
//! same origin as the dashboard, so it could read the CSRF token and act.
//! Its requests still carry the attacker's name in `Host`, so the names
//! the dashboard answers to are checked on every route.
//!
//! Without authentication the dashboard answers only to the loopback names
//! (`localhost`, `127.0.0.1`, `[::1]`, any port) and the names given to
//! [`Dashboard::allowed_hosts`](super::Dashboard::allowed_hosts). With
//! authentication, a rebound page has no credentials (the browser keeps
//! them per origin), so any name is answered unless allowed hosts were
//! given, which are then enforced too. A proxy's `X-Forwarded-Host` must
//! itself be allowed; it is then the host that the `Origin` of an action
//! is compared with (`csrf`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Error;

/// The header a reverse proxy puts the name the browser asked for in.
const FORWARDED_HOST: &str = "x-forwarded-host";

/// Names every dashboard without authentication answers to, at any port.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host the browser asked for, once checked: what `csrf` compares an
/// `Origin` with.
#[derive(Debug, Clone)]
pub(crate) struct AskedHost(pub String);

/// The names the dashboard answers to.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// Lower-case `name` (any port) or `name:port`.
    allowed: Vec<String>,
    /// Whether `Host` is checked at all (no authentication, or allowed
    /// hosts were given).
    checked: bool,
}

impl Hosts {
    /// The names of `allowed` (each `name` or `name:port`), checked with or
    /// without authentication as the module says.
    pub(crate) fn new(allowed: &[String], authenticated: bool) -> Result<Self, Error> {
        let allowed: Vec<String> = allowed.iter().map(|h| h.trim().to_ascii_lowercase()).collect();
        if let Some(bad) = allowed
            .iter()
            .find(|h| h.is_empty() || h.contains(|c: char| c.is_whitespace() || c.is_control() || "/?#@,".contains(c)))
        {
            return Err(Error::InvalidArgument(format!(
                "allowed host {bad:?} must be a name or name:port, without scheme or path"
            )));
        }
        let checked = !authenticated || !allowed.is_empty();
        Ok(Hosts { allowed, checked })
    }

    /// The names of a dashboard without authentication or allowed hosts:
    /// the loopback names only.
    pub(crate) fn open_loopback() -> Self {
        Hosts {
            allowed: Vec::new(),
            checked: true,
        }
    }

    fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = name_of(&host);
        LOOPBACK.contains(&name) || self.allowed.iter().any(|a| *a == host || *a == name)
    }
}

/// `host` without its port: `[::1]:80` -> `[::1]`, `a:80` -> `a`.
fn name_of(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

/// Lets the request through when its `Host` (and `X-Forwarded-Host`) is
/// allowed; else 403.
pub(crate) async fn check(State(hosts): State<Arc<Hosts>>, mut req: Request, next: Next) -> Response {
    match asked_host(&hosts, req.headers(), req.uri().authority().map(|a| a.as_str())) {
        Ok(asked) => {
            if let Some(asked) = asked {
                req.extensions_mut().insert(AskedHost(asked));
            }
            next.run(req).await
        }
        Err(host) => (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "error": format!(
                    "host {host:?} is not allowed: this dashboard answers to loopback names and its allowed hosts \
                     (Dashboard::allowed_hosts, delayqueue web --allowed-host)"
                )
            })),
        )
            .into_response(),
    }
}

/// The host the browser asked for (`X-Forwarded-Host` when present, else
/// `Host`, else the URI's authority), or the name that is not allowed.
fn asked_host(hosts: &Hosts, headers: &HeaderMap, authority: Option<&str>) -> Result<Option<String>, String> {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}").to_string());
    let host = text(header::HOST).or_else(|| authority.map(str::to_string));
    let forwarded = text(header::HeaderName::from_static(FORWARDED_HOST));
    if !hosts.checked {
        return Ok(host);
    }
    for h in host.iter().chain(&forwarded) {
        if !hosts.allows(h) {
            return Err(h.clone());
        }
    }
    Ok(forwarded.or(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn loopback_and_allowed_names_pass_others_do_not() {
        let open = Hosts::new(&["Dash.example.com".into(), "proxy:8443".into()], false).unwrap();
        for ok in [
            "localhost:8080",
            "127.0.0.1",
            "[::1]:80",
            "dash.example.com:1",
            "DASH.example.com",
            "proxy:8443",
        ] {
            assert!(open.allows(ok), "{ok}");
        }
        for bad in [
            "rebind.attacker.example:8080",
            "proxy:8444",
            "proxy",
            "localhost.attacker.example",
            "[::2]:80",
        ] {
            assert!(!open.allows(bad), "{bad}");
        }
        let h = headers(&[("host", "127.0.0.1:9"), ("x-forwarded-host", "dash.example.com")]);
        assert_eq!(asked_host(&open, &h, None), Ok(Some("dash.example.com".into())));
        let h = headers(&[("host", "127.0.0.1:9"), ("x-forwarded-host", "evil")]);
        assert_eq!(asked_host(&open, &h, None), Err("evil".into()));
        assert_eq!(asked_host(&open, &headers(&[]), None), Ok(None), "not a browser");
        assert_eq!(asked_host(&open, &headers(&[]), Some("evil:1")), Err("evil:1".into()));

        let with_auth = Hosts::new(&[], true).unwrap();
        let h = headers(&[("host", "anything:1"), ("x-forwarded-host", "evil")]);
        assert_eq!(
            asked_host(&with_auth, &h, None),
            Ok(Some("anything:1".into())),
            "not honoured"
        );
        let listed = Hosts::new(&["dash".into()], true).unwrap();
        assert!(asked_host(&listed, &headers(&[("host", "other")]), None).is_err());

        for bad in ["", "http://a", "a/b", "a b"] {
            assert!(Hosts::new(&[bad.into()], false).is_err(), "{bad:?}");
        }
    }
}
