//! `delayqueue web`: the dashboard of `delayqueue::web`, served at `/`
//! until Ctrl-C.

use std::net::SocketAddr;

use delayqueue::fred::prelude::Client;
use delayqueue::web::{Auth, Dashboard};

use crate::args::WebArgs;
use crate::failure::Failure;

/// Reads the auth, resolves `--listen`, refuses an address that is not
/// loopback when there is no auth, binds it and serves the dashboard
/// until Ctrl-C. Without auth the dashboard answers to its own address,
/// the loopback names and `--allowed-host` only.
pub async fn serve(client: Client, prefix: String, args: WebArgs) -> Result<u8, Failure> {
    let auth = auth(&args)?;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(args.listen.as_str())
        .await
        .map_err(|e| Failure::usage(format!("cannot resolve --listen {}: {e}", args.listen)))?
        .collect();
    if matches!(auth, Auth::None) && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(Failure::usage(format!(
            "refusing to serve the dashboard on {} without authentication: it is not a loopback address; \
             pass --token or --basic (or DELAYQUEUE_WEB_TOKEN / DELAYQUEUE_WEB_BASIC), or listen on 127.0.0.1",
            args.listen
        )));
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.listen)))?;

    let local = listener
        .local_addr()
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let mut dashboard = Dashboard::new(client)
        .key_prefix(prefix)
        .read_only(args.read_only)
        .allowed_hosts(&args.allowed_host);
    if matches!(auth, Auth::None) {
        // Its own address, whatever loopback address --listen names.
        dashboard = dashboard.allowed_hosts([local.to_string()]);
    }
    let app = dashboard
        .auth(auth)
        .router()
        .map_err(|e| Failure::usage(e.to_string()))?;
    println!("dashboard on http://{local}/ (metrics at /metrics); Ctrl-C stops it");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::usage(format!("serving the dashboard failed: {e}")))?;
    Ok(0)
}

/// The authentication `args` ask for: --token / --basic, else
/// `$DELAYQUEUE_WEB_TOKEN` / `$DELAYQUEUE_WEB_BASIC`; `None` when neither.
fn auth(args: &WebArgs) -> Result<Auth, Failure> {
    // A variable set but empty is a secret meant but missing: refused below.
    let env = |name| std::env::var(name).ok();
    let (token, basic) = match (&args.token, &args.basic) {
        (None, None) => (env("DELAYQUEUE_WEB_TOKEN"), env("DELAYQUEUE_WEB_BASIC")),
        (token, basic) => (token.clone(), basic.clone()),
    };
    match (token, basic) {
        (Some(token), None) if token.is_empty() => Err(Failure::usage(
            "the token (--token or DELAYQUEUE_WEB_TOKEN) must not be empty: is the variable it was given from set?",
        )),
        (Some(_), Some(_)) => Err(Failure::usage(
            "both a token and basic auth are set (DELAYQUEUE_WEB_TOKEN, DELAYQUEUE_WEB_BASIC): choose one",
        )),
        (Some(token), None) => Ok(Auth::Bearer(token)),
        (None, Some(basic)) => match basic.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Auth::Basic {
                user: user.to_string(),
                password: password.to_string(),
            }),
            Some(_) => Err(Failure::usage("--basic: USER and PASSWORD must not be empty")),
            None => Err(Failure::usage("--basic must be USER:PASSWORD")),
        },
        (None, None) => Ok(Auth::None),
    }
}
