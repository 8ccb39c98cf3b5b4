//! The wake-up subscriber's primary on a cluster: one with no trouble
//! seen lately, left when it fails.

use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::prelude::{Client, ClientLike, EventInterface, Server, Value};
use tokio::sync::{broadcast, watch};

use super::map;
use super::{of, Nodes, STUCK};

/// How often the wake-up subscriber's node is asked whether it answers.
const CHECK: Duration = Duration::from_millis(500);

/// A connection of its own for the wake-up subscriber of `client`, to a
/// primary with no trouble seen lately (a cluster passes every `PUBLISH`
/// to every node, so any one hears every queue), with what tells it when
/// to move ([`Subscriber::moved_off`]); `None` when `client` is not a
/// cluster client with held nodes, or no primary is known yet.
pub(crate) async fn subscriber(client: &Client) -> Option<Subscriber> {
    let nodes = of(client)?;
    nodes.started().await;
    let map = nodes.map();
    let node = map.nodes.iter().find(|n| nodes.serving(&n.host, n.port))?;
    let client = map::client_for(&nodes.cluster, &node.host, node.port)?;
    let errors = client.error_rx();
    let check = tokio::spawn(check(Arc::downgrade(&nodes), node.host.clone(), node.port, errors)).abort_handle();
    Some(Subscriber {
        news: nodes.news.subscribe(),
        nodes: Arc::downgrade(&nodes),
        host: node.host.clone(),
        port: node.port,
        client,
        check,
    })
}

/// The wake-up subscriber's connection on a cluster ([`subscriber`]).
pub(crate) struct Subscriber {
    pub client: Client,
    host: String,
    port: u16,
    nodes: Weak<Nodes>,
    news: watch::Receiver<u64>,
    check: tokio::task::AbortHandle,
}

impl Subscriber {
    /// Resolves once its node is no longer a primary, or seemed in
    /// trouble to a command or to its check ([`check`]): time to subscribe
    /// elsewhere. Never while the nodes are not held any more.
    pub(crate) async fn moved_off(&mut self) {
        loop {
            if self.news.changed().await.is_err() {
                return std::future::pending().await;
            }
            match self.nodes.upgrade() {
                Some(nodes) if !nodes.serving(&self.host, self.port) => return,
                Some(_) => {}
                None => return std::future::pending().await,
            }
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.check.abort();
    }
}

/// Marks the subscriber's node in trouble when its subscribed connection
/// fails (`errors`), or when the node does not answer a `PING` on its
/// command connection (no queue may be sending it anything) within
/// [`STUCK`], asked every [`CHECK`].
async fn check(
    nodes: Weak<Nodes>,
    host: String,
    port: u16,
    mut errors: broadcast::Receiver<(fred::error::Error, Option<Server>)>,
) {
    let node = || {
        nodes
            .upgrade()
            .and_then(|n| n.map().nodes.iter().find(|n| n.is(&host, port)).cloned())
    };
    let mut every = tokio::time::interval(CHECK);
    loop {
        let answered = tokio::select! {
            error = errors.recv() => match error {
                Err(broadcast::error::RecvError::Closed) => return,
                // An error of the subscribed connection, or several.
                _ => false,
            },
            _ = every.tick() => match node() {
                Some(node) => matches!(tokio::time::timeout(STUCK, node.client.ping::<Value>(None)).await, Ok(Ok(_))),
                None => true,
            },
        };
        if !answered {
            if let (Some(nodes), Some(node)) = (nodes.upgrade(), node()) {
                nodes.trouble(&node);
            }
        }
    }
}
