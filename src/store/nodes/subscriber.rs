//! Where a wake-up channel is subscribed on a cluster: on the primary
//! that owns the channel's slot, the one whose scripts publish on it. A
//! `PUBLISH` reaches a subscriber on another node only over the cluster
//! bus, which drops it while the link between the two nodes is down
//! (right after the cluster forms, or while a link is made again); on the
//! publishing node itself it is never lost.

use fred::prelude::Client;
use tokio::sync::watch;

use super::{map, of};

/// A primary's address, where channels are subscribed; `None` for a
/// connection of the given client's kind (a server that is not a cluster,
/// or a slot with no primary known).
pub(crate) type Place = Option<(String, u16)>;

/// Where each of `channels` is subscribed now, in order.
pub(crate) async fn places(client: &Client, channels: &[String]) -> Vec<Place> {
    let Some(nodes) = of(client) else {
        return vec![None; channels.len()];
    };
    nodes.started().await;
    let map = nodes.map();
    channels
        .iter()
        .map(|c| {
            map.owner(usize::from(fred::util::redis_keyslot(c.as_bytes())))
                .map(|n| (n.host.clone(), n.port))
        })
        .collect()
}

/// A new connection (not connected yet) for the subscriptions at `place`,
/// with `client`'s settings.
pub(crate) fn connection(client: &Client, place: &Place) -> Client {
    let node = place
        .as_ref()
        .zip(of(client))
        .and_then(|((host, port), nodes)| map::client_for(&nodes.cluster, host, *port));
    node.unwrap_or_else(|| client.clone_new())
}

/// Moves on with every new slot map, so that the channels whose primary
/// changed are subscribed on the new one; `None` but for a cluster client
/// whose nodes are held.
pub(crate) fn changes(client: &Client) -> Option<watch::Receiver<u64>> {
    of(client).map(|nodes| nodes.news.subscribe())
}
