//! The subscribed connections of a hub: one per place where its channels
//! are subscribed (on a cluster, each channel on the primary that owns its
//! slot: `store::nodes::subscriber`; else one), each with a task that
//! routes its messages to the loops of their channel and subscribes its
//! channels again after a reconnect.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use fred::prelude::{Client, ClientLike, EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use super::bell::Bell;
use crate::consume::aborts;
use crate::store::nodes::subscriber::{self, Place};

/// How long start-up waits for the connection and the subscription (and
/// a reconnect for the subscription).
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `call`, or why it failed, within [`SUBSCRIBE_TIMEOUT`].
async fn in_time<T>(call: impl std::future::Future<Output = Result<T, fred::error::Error>>) -> Result<T, String> {
    match tokio::time::timeout(SUBSCRIBE_TIMEOUT, call).await {
        Ok(done) => done.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {SUBSCRIBE_TIMEOUT:?}")),
    }
}

/// Subscribes `client` to `channels`, confirmed: fred answers a `SUBSCRIBE`
/// once it is written, not once Redis has run it, so a wake-up published
/// right after (a send on another connection) could find no subscriber
/// yet. Redis answers a connection's commands in order, so the reply to a
/// `PING` behind it means it ran.
async fn subscribe_on(client: &Client, channels: Vec<String>) -> Result<(), String> {
    in_time(async {
        client.subscribe(channels).await?;
        client.ping::<fred::types::Value>(None).await.map(drop)
    })
    .await
}

/// A loop listening on a channel: its listener's number, where its wake-ups go.
pub(super) type Route = (u64, Arc<Bell>);

/// The channels of a hub, where they are subscribed, and the loops
/// listening on each.
pub(super) struct Subscriptions {
    /// The client the consumers were given.
    origin: Client,
    conns: Mutex<Vec<Conn>>,
    /// Channel -> the loops listening on it.
    pub(super) routes: Mutex<HashMap<String, Vec<Route>>>,
    /// Held while subscribing, unsubscribing or moving channels, so that
    /// an unsubscribe never undoes a subscription made for a listener that
    /// came in between, and a place gets one connection.
    pub(super) changes: tokio::sync::Mutex<()>,
    /// Numbers the listeners.
    pub(super) next: Mutex<u64>,
}

/// What subscribing did beyond subscribing a channel where it belongs.
#[derive(Default)]
pub(super) struct Subscribed {
    /// Channels not subscribed, with why.
    pub failed: Vec<(String, String)>,
    /// Channels subscribed through the cluster client (no primary known
    /// for their slot yet), on whichever node it picks: the cluster bus
    /// may drop their wake-ups, so their loops poll until they move to
    /// their primary.
    pub bus: Vec<String>,
    /// Each channel subscribed, with where.
    pub placed: Vec<(String, Place)>,
}

impl Subscribed {
    /// Whether wake-ups may not reach the loops of `channel`, so they poll.
    pub(super) fn polls(&self, channel: &str) -> bool {
        self.failed.iter().any(|(c, _)| c == channel) || self.bus.iter().any(|c| c == channel)
    }
}

/// One subscribed connection.
struct Conn {
    place: Place,
    client: Client,
    channels: HashSet<String>,
    /// Its task ([`pump`]).
    pump: tokio::task::AbortHandle,
}

impl Subscriptions {
    pub(super) fn new(origin: &Client) -> Self {
        Subscriptions {
            origin: origin.clone(),
            conns: Mutex::default(),
            routes: Mutex::default(),
            changes: tokio::sync::Mutex::new(()),
            next: Mutex::new(0),
        }
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes `channels`, each at its place, opening the connection of
    /// a place that has none; says which of them wake-ups may not reach.
    /// The caller holds `changes`.
    pub(super) async fn subscribe(self: &Arc<Self>, channels: Vec<String>) -> Subscribed {
        let places = subscriber::places(&self.origin, &channels).await;
        let mut by_place: Vec<(Place, Vec<String>)> = Vec::new();
        for (channel, place) in channels.into_iter().zip(places) {
            match by_place.iter_mut().find(|(p, _)| *p == place) {
                Some((_, those)) => those.push(channel),
                None => by_place.push((place, vec![channel])),
            }
        }
        let mut done = Subscribed::default();
        for (place, those) in by_place {
            let known = self.conns().iter().find(|c| c.place == place).map(|c| c.client.clone());
            let client = match known {
                Some(client) => Ok(client),
                None => self.open(&place).await,
            };
            let subscribed = match client {
                Ok(client) => subscribe_on(&client, those.clone()).await,
                Err(error) => Err(error),
            };
            match subscribed {
                Ok(()) => {
                    // On a cluster, a channel whose slot has no primary known
                    // yet is subscribed through the cluster client, on any
                    // node: the bus may drop its wake-ups.
                    if place.is_none() && self.origin.is_clustered() {
                        done.bus.extend(those.iter().cloned());
                    }
                    done.placed.extend(those.iter().map(|c| (c.clone(), place.clone())));
                    if let Some(conn) = self.conns().iter_mut().find(|c| c.place == place) {
                        conn.channels.extend(those);
                    }
                }
                Err(error) => done.failed.extend(those.into_iter().map(|c| (c, error.clone()))),
            }
        }
        done
    }

    /// A connection of its own for `place` (a subscribed connection serves
    /// nothing else), connected, with its task.
    async fn open(self: &Arc<Self>, place: &Place) -> Result<Client, String> {
        let client = subscriber::connection(&self.origin, place);
        let (messages, reconnects) = (client.message_rx(), client.reconnect_rx());
        if let Err(error) = in_time(client.init()).await {
            // Not awaited: the caller holds `changes`, which every new
            // listener waits for, and a quit waits up to the command timeout.
            tokio::spawn(async move {
                let _ = client.quit().await;
            });
            return Err(error);
        }
        let pump = tokio::spawn(pump(Arc::downgrade(self), client.clone(), messages, reconnects)).abort_handle();
        self.conns().push(Conn {
            place: place.clone(),
            client: client.clone(),
            channels: HashSet::new(),
            pump,
        });
        Ok(client)
    }

    /// Unsubscribes `channels` wherever they are, and closes the
    /// connections left with none. The caller holds `changes`.
    pub(super) async fn unsubscribe(&self, channels: &[String]) {
        self.take_off(channels, |_, _| true).await;
    }

    /// Takes each of `channels` off every connection `from` names for it,
    /// unsubscribes it there, and closes the connections left with none.
    async fn take_off(&self, channels: &[String], from: impl Fn(&Conn, &str) -> bool) {
        let mut left: Vec<(Client, Vec<String>)> = Vec::new();
        let mut emptied = Vec::new();
        {
            let mut conns = self.conns();
            for conn in conns.iter_mut() {
                let mut here = Vec::new();
                for channel in channels {
                    if from(conn, channel) && conn.channels.remove(channel) {
                        here.push(channel.clone());
                    }
                }
                if !here.is_empty() {
                    left.push((conn.client.clone(), here));
                }
            }
            conns.retain(|c| {
                let keep = !c.channels.is_empty();
                if !keep {
                    emptied.push((c.client.clone(), c.pump.clone()));
                }
                keep
            });
        }
        for (client, here) in left {
            if emptied.iter().any(|(c, _)| c.id() == client.id()) {
                continue;
            }
            // Bounded: fred sends it only once its connection is up, and
            // the caller holds `changes`, which every new listener waits for.
            if let Err(e) = in_time(client.unsubscribe(here)).await {
                tracing::debug!(error = %e, "cannot unsubscribe from wake-ups");
            }
        }
        for (client, pump) in emptied {
            pump.abort();
            tokio::spawn(async move {
                let _ = client.quit().await;
            });
        }
    }

    /// Subscribes every channel not subscribed where it belongs now (its
    /// slot moved to another primary, or subscribing failed before) there,
    /// and unsubscribes it where it was; its loops probe at once, as its
    /// wake-ups may have been lost meanwhile.
    pub(super) async fn settle(self: &Arc<Self>) {
        let _changing = self.changes.lock().await;
        let channels: Vec<String> = self
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        let places = subscriber::places(&self.origin, &channels).await;
        let moved: Vec<String> = {
            let conns = self.conns();
            channels
                .into_iter()
                .zip(places)
                .filter(|(channel, place)| !conns.iter().any(|c| c.place == *place && c.channels.contains(channel)))
                .map(|(channel, _)| channel)
                .collect()
        };
        if moved.is_empty() {
            return;
        }
        let done = self.subscribe(moved.clone()).await;
        for (channel, error) in &done.failed {
            tracing::debug!(%channel, %error, "cannot subscribe to wake-ups where the channel moved; its loops poll");
        }
        // Off every other connection, by where this subscribe put it (the
        // map may have moved on since).
        let placed: HashMap<&str, &Place> = done.placed.iter().map(|(c, p)| (c.as_str(), p)).collect();
        let placed_channels: Vec<String> = done.placed.iter().map(|(c, _)| c.clone()).collect();
        self.take_off(&placed_channels, |conn, channel| {
            placed.get(channel).is_some_and(|p| conn.place != **p)
        })
        .await;
        let (deaf, heard): (Vec<String>, Vec<String>) = moved.into_iter().partition(|c| done.polls(c));
        self.look_again(&heard, true);
        self.look_again(&deaf, false);
    }

    /// After `channels` were subscribed again (or moved): wake-ups
    /// published meanwhile are lost, so their loops probe now; and poll
    /// from now on unless `subscribed`.
    pub(super) fn look_again(&self, channels: &[String], subscribed: bool) {
        let (routes, now) = (self.routes.lock().unwrap_or_else(|e| e.into_inner()), Instant::now());
        for bell in channels.iter().filter_map(|c| routes.get(c)).flatten().map(|(_, b)| b) {
            bell.set_deaf(!subscribed);
            bell.ring(now, true);
        }
    }

    /// Closes every connection.
    pub(super) async fn close(&self) {
        let conns: Vec<Conn> = std::mem::take(&mut *self.conns());
        for conn in conns {
            conn.pump.abort();
            let _ = conn.client.quit().await;
        }
    }

    /// Rings the loops of the message's channel, or fires its abort signal.
    fn route(&self, msg: &Message) {
        if let Some(id) = msg.value.as_str().as_deref().and_then(aborts::signalled) {
            aborts::fire(&msg.channel, id);
            return;
        }
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(listeners) = routes.get(&*msg.channel) {
            let at = Instant::now() + Duration::from_millis(msg.value.as_u64().unwrap_or(0));
            for (_, bell) in listeners {
                bell.ring(at, false);
            }
        }
    }

    /// Rings every loop of `channels` for now.
    fn ring_all(&self, channels: &[String]) {
        let (routes, now) = (self.routes.lock().unwrap_or_else(|e| e.into_inner()), Instant::now());
        for bell in channels.iter().filter_map(|c| routes.get(c)).flatten().map(|(_, b)| b) {
            bell.ring(now, false);
        }
    }

    /// The channels subscribed on `client`.
    fn channels_of(&self, client: &Client) -> Vec<String> {
        self.conns()
            .iter()
            .find(|c| c.client.id() == client.id())
            .map(|c| c.channels.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Routes the messages of one subscribed connection until it is closed,
/// and subscribes its channels again after each reconnect.
async fn pump(
    subs: Weak<Subscriptions>,
    client: Client,
    mut messages: broadcast::Receiver<Message>,
    mut reconnects: broadcast::Receiver<fred::prelude::Server>,
) {
    loop {
        tokio::select! {
            msg = messages.recv() => {
                let Some(subs) = subs.upgrade() else { return };
                match msg {
                    Ok(msg) => subs.route(&msg),
                    // Missed some (wake-ups come faster than they are
                    // routed): its loops promote and claim now, and probe
                    // within their fetch_interval.
                    Err(RecvError::Lagged(_)) => subs.ring_all(&subs.channels_of(&client)),
                    Err(RecvError::Closed) => return,
                }
            }
            Ok(_) = reconnects.recv() => {
                let Some(subs) = subs.upgrade() else { return };
                // Beside the routing, which must go on meanwhile: a
                // subscribe in progress holds `changes` while it waits for
                // its check to be routed back.
                tokio::spawn(resubscribe(subs, client.clone()));
            }
        }
    }
}

/// Subscribes the channels of `client` again after it reconnected (or
/// first connected), and has their loops look at once: wake-ups published
/// while it was disconnected, or before the subscription was back, are lost.
async fn resubscribe(subs: Arc<Subscriptions>, client: Client) {
    let _changing = subs.changes.lock().await;
    let channels = subs.channels_of(&client);
    if channels.is_empty() {
        return;
    }
    let subscribed = match subscribe_on(&client, channels.clone()).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "cannot resubscribe to wake-ups; the consumers poll every fetch_interval until the next reconnect");
            false
        }
    };
    subs.look_again(&channels, subscribed);
}
