//! [`connect`]: a fred client with defaults that suit a queue.

use std::time::Duration;

use fred::prelude::{Builder, Client, ClientLike, Config, ReconnectPolicy, ServerConfig};

use crate::Error;

/// How long [`connect`] waits for the first connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Longest wait between reconnection attempts through Sentinel or on a
/// cluster, where a failover ends the outage: each attempt asks a sentinel
/// or a cluster node who the primaries are, which they answer cheaply.
const FAILOVER_RECONNECT_MAX: Duration = Duration::from_millis(200);
/// How long a cluster client waits for one node to accept a connection or
/// answer `CLUSTER SLOTS`, also when it first connects: while it
/// reconnects, every queue waits that long when the node asked is a
/// primary that stopped answering (see [`connect`]).
const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Attempts per command on a cluster: more than fred's 5 redirections (see
/// [`connect`]).
const CLUSTER_COMMAND_ATTEMPTS: u32 = 10;

/// Connects to Redis at `url` (`redis://`, `redis-cluster://`,
/// `redis-sentinel://`, and with the `tls` feature `rediss://`,
/// `rediss-cluster://`, `rediss-sentinel://`, trusting the system's root
/// certificates) with settings a queue needs and fred lacks by default:
///
/// - reconnect forever with exponential backoff (100 ms to 5 s): without a
///   policy a fred client hangs for good after Redis restarts. Through
///   Sentinel and on a cluster the backoff stops at 200 ms: each attempt
///   asks the sentinels or a node where the primaries are, so the client
///   reaches a promoted replica within 200 ms of the promotion rather than
///   up to a doubled delay later (on a cluster, the queues' own connection
///   per primary has the same policy; docs/scaling.md);
/// - a 10 s timeout on every command, so a dead connection surfaces as an
///   error instead of a hang;
/// - a 5 s limit on the first connection: an unreachable Redis is an error;
/// - on a cluster, 1 s for one node to accept a connection or answer
///   `CLUSTER SLOTS` (the first connection too): fred asks one node for the
///   slots when it reconnects, and a primary that stopped answering (a hung
///   process, a host behind a dead link) held every queue for the whole
///   timeout;
/// - on a cluster, more attempts per command (10) than redirections (5):
///   fred 10.1 sends a command that got `ASK` (its slot is being migrated)
///   back to the slot's old owner, which answers `ASK` again, and when the
///   command runs out of attempts before it runs out of redirections,
///   fred's connection task ends and the client hangs for good. With more
///   attempts the command fails with "Too many redirections" (retry it) and
///   the client lives on. Set this on a cluster client you build yourself.
///
/// ```no_run
/// # async fn run() -> Result<(), delayqueue::Error> {
/// let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Client, Error> {
    // Without a TLS backend fred would connect in plain text.
    let scheme = url.trim_start().get(..7).unwrap_or_default().to_ascii_lowercase();
    if !cfg!(feature = "tls") && (scheme.starts_with("rediss") || scheme.starts_with("valkeys")) {
        return Err(Error::InvalidArgument(
            "a rediss:// (TLS) url needs delayqueue's `tls` cargo feature".into(),
        ));
    }
    let config = Config::from_url(url)?;
    let clustered = config.server.is_clustered();
    let max_backoff = match config.server {
        ServerConfig::Sentinel { .. } | ServerConfig::Clustered { .. } => FAILOVER_RECONNECT_MAX,
        _ => RECONNECT_MAX,
    };
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            let node_timeout = if clustered {
                CLUSTER_CONNECT_TIMEOUT
            } else {
                CONNECT_TIMEOUT
            };
            c.connection_timeout = node_timeout;
            c.internal_command_timeout = node_timeout;
            if clustered {
                c.max_command_attempts = CLUSTER_COMMAND_ATTEMPTS;
            }
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .set_policy(ReconnectPolicy::new_exponential(
            0,
            100,
            max_backoff.as_millis() as u32,
            2,
        ))
        .build()?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.init()).await {
        Ok(Ok(_task)) => Ok(client),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => {
            // Stop its reconnecting without waiting: quitting a connection
            // that never answered waits out the command timeout.
            tokio::spawn(async move {
                let _ = client.quit().await;
            });
            Err(fred::error::Error::new(
                fred::error::ErrorKind::Timeout,
                format!("could not connect to {} within {CONNECT_TIMEOUT:?}", redact(url)),
            )
            .into())
        }
    }
}

/// `url` without the password of its user info, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_error_messages() {
        assert_eq!(redact("redis://:hunter2@127.0.0.1:6379"), "redis://***@127.0.0.1:6379");
        assert_eq!(redact("rediss://user:pw@h:1/0"), "rediss://***@h:1/0");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
