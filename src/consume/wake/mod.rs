//! Wake-ups: the subscribed connections of each client in the process
//! tell every sleeping consumer loop when work becomes due sooner than it
//! knows of.
//!
//! Scripts publish on the queue's wake-up channel when a message becomes
//! claimable (nack, timeout), a group may start its next message (ack,
//! nack or timeout freed a slot of it), something is due before every
//! other pending message or waiting group (send, nack with a delay, a
//! claim that holds a group at its rate), or a schedule becomes due (set,
//! resume); the message is how many milliseconds from now. An abort
//! signal on the same channel (`aborts.rs`) goes to the running handler
//! it names instead.
//! An idle consumer sleeps until one comes, but still probes at its idle
//! probe (at most 300 `fetch_interval`s apart), so a lost one (no pub/sub
//! permission, a dead connection not yet seen as such) costs at most that,
//! never a stuck message; those lost while disconnected cost nothing, as
//! every loop is woken once the channels are subscribed again. A consumer
//! that cannot subscribe (or resubscribe) probes every `fetch_interval`
//! until subscribing, tried again every 30 s, succeeds.
//!
//! The consumers of one [`Client`] (by its id: its clones share it) share
//! one [`Hub`]: its connections ([`subscriptions`]: on a cluster one per
//! primary whose slots they listen on, else one) are subscribed to every
//! channel they listen on, and route each message to the loops of that
//! channel. It lives while any consumer holds its [`Wakes`], and
//! unsubscribes a channel once no consumer listens on it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::prelude::{Client, ClientLike};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::nodes::subscriber;

mod bell;
mod subscriptions;

pub(crate) use bell::{Bell, Rung};
use subscriptions::Subscriptions;

/// How often a hub looks again for channels not subscribed where they
/// belong (subscribing failed), beside every new slot map of a cluster.
const SETTLE_EVERY: Duration = Duration::from_secs(30);

/// The hubs of the process, by client id.
static HUBS: tokio::sync::Mutex<Vec<(String, Weak<Hub>)>> = tokio::sync::Mutex::const_new(Vec::new());

/// The subscribed connections of a client and the loops listening through them.
pub(crate) struct Hub {
    subs: Arc<Subscriptions>,
    stop: watch::Sender<bool>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A consumer's place in a hub: dropping it stops its wake-ups.
pub(crate) struct Wakes {
    hub: Option<Arc<Hub>>,
    id: u64,
    channels: Vec<String>,
}

impl std::fmt::Debug for Wakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakes").field("channels", &self.channels.len()).finish()
    }
}

/// Listens on every channel of `channels` (one per loop) through the hub
/// of `client`, starting the hub when there is none. Returns once
/// subscribed, so every wake-up published after that arrives, with a
/// bell per channel; the bells of a channel that could not be subscribed
/// say so, and their loops just poll.
pub(crate) async fn listen(client: &Client, channels: Vec<String>) -> (Vec<Arc<Bell>>, Wakes) {
    let bells: Vec<Arc<Bell>> = channels.iter().map(|_| Arc::default()).collect();
    let hub = hub_of(client).await;
    let subs = &hub.subs;
    let id = {
        let mut next = subs.next.lock().unwrap_or_else(|e| e.into_inner());
        *next += 1;
        *next
    };
    let new: Vec<String> = {
        let mut routes = subs.routes.lock().unwrap_or_else(|e| e.into_inner());
        let mut new = Vec::new();
        for (channel, bell) in channels.iter().zip(&bells) {
            let listeners = routes.entry(channel.clone()).or_default();
            if listeners.is_empty() {
                new.push(channel.clone());
            }
            listeners.push((id, bell.clone()));
        }
        new
    };
    if !new.is_empty() {
        let _changing = subs.changes.lock().await;
        let done = subs.subscribe(new).await;
        if let Some((channel, error)) = done.failed.first() {
            tracing::warn!(%channel, %error, "cannot subscribe to wake-ups; the consumer polls every fetch_interval");
        }
        if let Some(channel) = done.bus.first() {
            tracing::debug!(%channel, "no primary known for the wake-up channel's slot yet; the consumer polls every fetch_interval until there is");
        }
        for (channel, bell) in channels.iter().zip(&bells) {
            if done.polls(channel) {
                bell.set_deaf(true);
            }
        }
    }
    let wakes = Wakes {
        hub: Some(hub),
        id,
        channels,
    };
    (bells, wakes)
}

/// The running hub of `client`, or a new one.
async fn hub_of(client: &Client) -> Arc<Hub> {
    let mut hubs = HUBS.lock().await;
    hubs.retain(|(_, hub)| hub.strong_count() > 0);
    if let Some(hub) = hubs
        .iter()
        .find(|(id, _)| id == client.id())
        .and_then(|(_, hub)| hub.upgrade())
    {
        return hub;
    }
    let subs = Arc::new(Subscriptions::new(client));
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(run(subs.clone(), subscriber::changes(client), stopped));
    let hub = Arc::new(Hub { subs, stop });
    hubs.push((client.id().to_string(), Arc::downgrade(&hub)));
    hub
}

impl Drop for Wakes {
    fn drop(&mut self) {
        let Some(hub) = self.hub.take() else {
            return;
        };
        let left: Vec<String> = {
            let mut routes = hub.subs.routes.lock().unwrap_or_else(|e| e.into_inner());
            let mut left = Vec::new();
            for channel in &self.channels {
                if let Some(listeners) = routes.get_mut(channel) {
                    listeners.retain(|(id, _)| *id != self.id);
                    if listeners.is_empty() {
                        routes.remove(channel);
                        left.push(channel.clone());
                    }
                }
            }
            left
        };
        // The last listener gone, the hub's connections close anyway.
        if left.is_empty() || Arc::strong_count(&hub) == 1 {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let subs = hub.subs.clone();
            runtime.spawn(async move {
                let _changing = subs.changes.lock().await;
                // Only those nobody listens on since.
                let left: Vec<String> = {
                    let routes = subs.routes.lock().unwrap_or_else(|e| e.into_inner());
                    left.into_iter().filter(|c| !routes.contains_key(c)).collect()
                };
                if !left.is_empty() {
                    subs.unsubscribe(&left).await;
                }
            });
        }
    }
}

/// Keeps every channel of the hub subscribed where it belongs (`map`
/// moves on with every new slot map of a cluster; [`SETTLE_EVERY`] for
/// channels whose subscribing failed) until the hub is dropped, then
/// closes its connections.
async fn run(subs: Arc<Subscriptions>, mut map: Option<watch::Receiver<u64>>, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval_at(Instant::now() + SETTLE_EVERY, SETTLE_EVERY);
    loop {
        let new_map = async {
            let changed = match &mut map {
                Some(map) => map.changed().await.is_ok(),
                None => false,
            };
            if !changed {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = stop.changed() => break,
            () = new_map => subs.settle().await,
            _ = every.tick() => subs.settle().await,
        }
    }
    subs.close().await;
}
