//! A cluster's slot map: which primary owns each slot, as `CLUSTER SLOTS`
//! says, with a connection per primary.

use std::time::Duration;

use fred::prelude::{Builder, Client, ClientLike, Server, ServerConfig, Value};
use fred::types::{ClusterHash, CustomCommand};

/// How long one node may take to answer `CLUSTER SLOTS`.
pub(super) const MAP_TIMEOUT: Duration = Duration::from_millis(500);
/// Slots of a Redis Cluster.
const SLOTS: usize = 16_384;
/// No primary known for a slot.
const NONE: u16 = u16::MAX;

/// Slots `.0..=.1` and their primary's host and port.
pub(super) type Range = (u16, u16, String, u16);

/// A primary and the connection to it.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) client: Client,
}

impl Node {
    pub(super) fn is(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port == port
    }
}

/// Which primary owns each slot.
#[derive(Default)]
pub(super) struct Map {
    /// Per slot, the index of its primary in `nodes`, or [`NONE`].
    owners: Vec<u16>,
    pub(super) nodes: Vec<Node>,
}

impl Map {
    /// The map of `ranges` (later ranges win), with the connections of
    /// `old` where a primary had one already and new ones from `connect`.
    pub(super) fn new(ranges: Vec<Range>, old: &Map, connect: impl Fn(&str, u16) -> Option<Client>) -> Map {
        let mut nodes: Vec<Node> = Vec::new();
        let mut owners = vec![NONE; SLOTS];
        for (start, end, host, port) in ranges {
            let i = match nodes.iter().position(|n| n.is(&host, port)) {
                Some(i) => i,
                None => {
                    let kept = old.nodes.iter().find(|n| n.is(&host, port)).cloned();
                    let connected = || {
                        connect(&host, port).map(|client| Node {
                            host: host.clone(),
                            port,
                            client,
                        })
                    };
                    let Some(node) = kept.or_else(connected) else { continue };
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            let (start, end) = (usize::from(start), usize::from(end).min(SLOTS - 1));
            if let Some(slots) = owners.get_mut(start..=end) {
                slots.fill(i as u16);
            }
        }
        Map { owners, nodes }
    }

    /// The primary of `slot`.
    pub(super) fn owner(&self, slot: usize) -> Option<&Node> {
        self.nodes.get(usize::from(*self.owners.get(slot)?))
    }

    /// Whether some slot has another primary in `other`.
    pub(super) fn differs(&self, other: &Map) -> bool {
        (0..SLOTS).any(|s| match (self.owner(s), other.owner(s)) {
            (Some(a), Some(b)) => !a.is(&b.host, b.port),
            (a, b) => a.is_some() != b.is_some(),
        })
    }

    /// The connections of primaries that `new` has not.
    pub(super) fn left(&self, new: &Map) -> Vec<Client> {
        self.nodes
            .iter()
            .filter(|o| !new.nodes.iter().any(|n| n.is(&o.host, o.port)))
            .map(|o| o.client.clone())
            .collect()
    }

    /// The map as ranges of slots and their primary.
    pub(super) fn ranges(&self) -> Vec<Range> {
        let mut out: Vec<Range> = Vec::new();
        for slot in 0..self.owners.len() {
            let Some(node) = self.owner(slot) else { continue };
            match out.last_mut() {
                Some(last) if usize::from(last.1) + 1 == slot && node.is(&last.2, last.3) => last.1 = slot as u16,
                _ => out.push((slot as u16, slot as u16, node.host.clone(), node.port)),
            }
        }
        out
    }
}

/// A centralized client to `host:port` with the settings of `cluster`,
/// not connected yet.
pub(super) fn client_for(cluster: &Client, host: &str, port: u16) -> Option<Client> {
    let mut config = cluster.client_config();
    let tls_name = match &config.server {
        ServerConfig::Clustered { hosts, .. } => hosts.iter().find(|s| s.host == host).and_then(tls_server_name),
        _ => None,
    };
    config.server = ServerConfig::Centralized {
        server: server(host, port, tls_name),
    };
    let mut builder = Builder::from_config(config);
    builder
        .set_connection_config(cluster.connection_config().clone())
        .set_performance_config(cluster.perf_config());
    if let Some(policy) = cluster.client_reconnect_policy() {
        builder.set_policy(policy);
    }
    builder.build().ok()
}

/// `CLUSTER SLOTS` read on `client`, whose node is `host` (for replies
/// that leave the host out), within [`MAP_TIMEOUT`].
pub(super) async fn read(client: Client, host: String) -> Result<Vec<Range>, ()> {
    let command = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
    match tokio::time::timeout(MAP_TIMEOUT, client.custom::<Value, _>(command, vec!["SLOTS"])).await {
        Ok(Ok(reply)) => parse_slots(reply, &host).ok_or(()),
        _ => Err(()),
    }
}

/// The ranges of a `CLUSTER SLOTS` reply with their primary's address (an
/// empty host is the one of the node asked).
fn parse_slots(reply: Value, asked: &str) -> Option<Vec<Range>> {
    let Value::Array(ranges) = reply else { return None };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(range) = range else { return None };
        let start = u16::try_from(range.first()?.as_i64()?).ok()?;
        let end = u16::try_from(range.get(1)?.as_i64()?).ok()?;
        let Value::Array(primary) = range.get(2)? else {
            return None;
        };
        let host = primary.first()?.as_string()?;
        let port = u16::try_from(primary.get(1)?.as_i64()?).ok()?;
        let host = if host.is_empty() || host == "?" {
            asked.to_string()
        } else {
            host
        };
        out.push((start, end, host, port));
    }
    Some(out)
}

#[cfg(feature = "tls")]
fn tls_server_name(server: &Server) -> Option<String> {
    server.tls_server_name.as_ref().map(|s| s.to_string())
}

#[cfg(not(feature = "tls"))]
fn tls_server_name(_: &Server) -> Option<String> {
    None
}

#[cfg(feature = "tls")]
fn server(host: &str, port: u16, tls_name: Option<String>) -> Server {
    Server::new_with_tls(host.to_string(), port, tls_name)
}

#[cfg(not(feature = "tls"))]
fn server(host: &str, port: u16, _: Option<String>) -> Server {
    Server::new(host.to_string(), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            start.into(),
            end.into(),
            Value::Array(vec![host.into(), port.into(), "id".into()]),
            Value::Array(vec!["10.0.0.9".into(), 7001.into(), "replica".into()]),
        ])
    }

    #[test]
    fn cluster_slots_are_read_with_their_primaries_and_nothing_else() {
        let reply = Value::Array(vec![range(0, 5460, "10.0.0.1", 7000), range(5461, 16383, "", 7002)]);
        assert_eq!(
            parse_slots(reply, "10.0.0.5"),
            Some(vec![
                (0, 5460, "10.0.0.1".into(), 7000),
                (5461, 16383, "10.0.0.5".into(), 7002)
            ])
        );
        // A host Redis does not know is the one asked; a malformed reply is none.
        assert_eq!(
            parse_slots(Value::Array(vec![range(0, 1, "?", 1)]), "h"),
            Some(vec![(0, 1, "h".into(), 1)])
        );
        assert_eq!(parse_slots(Value::Array(vec![range(0, 70_000, "h", 1)]), "h"), None);
        assert_eq!(parse_slots(Value::Array(vec![Value::Array(vec![1.into()])]), "h"), None);
        assert_eq!(parse_slots("OK".into(), "h"), None);
    }
}
