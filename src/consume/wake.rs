//! Wake-ups: one subscriber connection per client in the process tells
//! every sleeping consumer loop when work becomes due sooner than it knows of.
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
//! that cannot subscribe (or resubscribe) probes every `fetch_interval`.
//!
//! The consumers of one [`Client`] (by its id: its clones share it) share
//! one [`Hub`]: one connection subscribed to every channel they listen
//! on, which routes each message to the loops of that channel. It lives
//! while any consumer holds its [`Wakes`], and unsubscribes a channel once
//! no consumer listens on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use fred::prelude::{Client, ClientLike, EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::aborts;
use crate::store::nodes;

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

/// The hubs of the process, by client id.
static HUBS: tokio::sync::Mutex<Vec<(String, Weak<Hub>)>> = tokio::sync::Mutex::const_new(Vec::new());

/// One subscriber connection and the loops listening through it.
pub(crate) struct Hub {
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
}

/// A loop listening on a channel: its listener's number, where its wake-ups go.
type Route = (u64, Arc<Bell>);

/// What the wake-ups of a loop since it last looked ask of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rung {
    /// The earliest instant asked for: a loop needs no other, as it
    /// promotes at the earliest and claims when that is now.
    pub at: Instant,
    /// Wake-ups may have been lost (the subscriber reconnected): probe now.
    pub probe: bool,
}

/// Where the wake-ups of one loop go, and whether they reach it at all.
/// Far smaller than a channel, which an idle loop would hold all along.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    due: Mutex<Option<Rung>>,
    rang: Notify,
    /// Its channel is not subscribed (at start, or since a failed
    /// resubscribe): wake-ups are lost, so its loop polls.
    deaf: AtomicBool,
}

impl Bell {
    fn ring(&self, at: Instant, probe: bool) {
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        *due = Some(match *due {
            Some(was) => Rung {
                at: was.at.min(at),
                probe: was.probe || probe,
            },
            None => Rung { at, probe },
        });
        drop(due);
        self.rang.notify_one();
    }

    /// What was asked since the last look, if anything.
    pub(crate) fn take(&self) -> Option<Rung> {
        self.due.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The next wake-up.
    pub(crate) async fn rung(&self) -> Rung {
        loop {
            if let Some(at) = self.take() {
                return at;
            }
            self.rang.notified().await;
        }
    }

    /// Whether wake-ups reach its loop, so it may sleep until its idle probe.
    pub(crate) fn subscribed(&self) -> bool {
        !self.deaf.load(Ordering::Relaxed)
    }
}

struct Inner {
    /// The client the consumers were given.
    origin: Client,
    /// The subscribed connection: on a cluster, to one primary, replaced
    /// when that one fails (`store::nodes`).
    sub: Mutex<Client>,
    /// Channel -> the loops listening on it.
    routes: Mutex<HashMap<String, Vec<Route>>>,
    /// Held while subscribing or unsubscribing, so an unsubscribe never
    /// undoes a subscription made for a listener that came in between.
    changes: tokio::sync::Mutex<()>,
    /// Numbers the listeners.
    next: Mutex<u64>,
}

impl Inner {
    fn sub(&self) -> Client {
        self.sub.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// After the subscription was made again (or moved): wake-ups published
    /// meanwhile are lost, so every loop probes now; and polls from now on
    /// unless `subscribed`.
    fn look_again(&self, subscribed: bool) {
        let (routes, now) = (self.routes.lock().unwrap_or_else(|e| e.into_inner()), Instant::now());
        for (_, bell) in routes.values().flatten() {
            bell.deaf.store(!subscribed, Ordering::Relaxed);
            bell.ring(now, true);
        }
    }

    /// Every channel listened on.
    fn channels(&self) -> Vec<String> {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
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
/// bell per channel; when subscribing fails its bells say so, and the
/// loops just poll.
pub(crate) async fn listen(client: &Client, channels: Vec<String>) -> (Vec<Arc<Bell>>, Wakes) {
    let bells: Vec<Arc<Bell>> = channels.iter().map(|_| Arc::default()).collect();
    let deaf = |bells: &[Arc<Bell>]| bells.iter().for_each(|b| b.deaf.store(true, Ordering::Relaxed));
    let hub = match hub_of(client).await {
        Ok(hub) => hub,
        Err(error) => {
            tracing::warn!(channel = %channels[0], %error, "cannot subscribe to wake-ups; the consumer polls every fetch_interval");
            deaf(&bells);
            let wakes = Wakes {
                hub: None,
                id: 0,
                channels,
            };
            return (bells, wakes);
        }
    };
    let inner = &hub.inner;
    let id = {
        let mut next = inner.next.lock().unwrap_or_else(|e| e.into_inner());
        *next += 1;
        *next
    };
    let new: Vec<String> = {
        let mut routes = inner.routes.lock().unwrap_or_else(|e| e.into_inner());
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
        let _changing = inner.changes.lock().await;
        if let Err(error) = in_time(inner.sub().subscribe(new)).await {
            deaf(&bells);
            tracing::warn!(channel = %channels[0], %error, "cannot subscribe to wake-ups; the consumer polls every fetch_interval");
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
async fn hub_of(client: &Client) -> Result<Arc<Hub>, String> {
    let mut hubs = HUBS.lock().await;
    hubs.retain(|(_, hub)| hub.strong_count() > 0);
    if let Some(hub) = hubs
        .iter()
        .find(|(id, _)| id == client.id())
        .and_then(|(_, hub)| hub.upgrade())
    {
        return Ok(hub);
    }
    // A subscribed connection serves nothing else: a connection of its own.
    let (sub, node) = match nodes::subscriber::subscriber(client).await {
        Some(node) => (node.client.clone(), Some(node)),
        None => (client.clone_new(), None),
    };
    let messages = sub.message_rx();
    if let Err(error) = in_time(sub.init()).await {
        let _ = sub.quit().await;
        return Err(error);
    }
    let inner = Arc::new(Inner {
        origin: client.clone(),
        sub: Mutex::new(sub),
        routes: Mutex::default(),
        changes: tokio::sync::Mutex::new(()),
        next: Mutex::new(0),
    });
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(run(inner.clone(), messages, node, stopped));
    let hub = Arc::new(Hub { inner, stop });
    hubs.push((client.id().to_string(), Arc::downgrade(&hub)));
    Ok(hub)
}

impl Drop for Wakes {
    fn drop(&mut self) {
        let Some(hub) = self.hub.take() else {
            return;
        };
        let left: Vec<String> = {
            let mut routes = hub.inner.routes.lock().unwrap_or_else(|e| e.into_inner());
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
        // The last listener gone, the hub's connection closes anyway.
        if left.is_empty() || Arc::strong_count(&hub) == 1 {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let inner = hub.inner.clone();
            runtime.spawn(async move {
                let _changing = inner.changes.lock().await;
                // Only those nobody listens on since.
                let left: Vec<String> = {
                    let routes = inner.routes.lock().unwrap_or_else(|e| e.into_inner());
                    left.into_iter().filter(|c| !routes.contains_key(c)).collect()
                };
                if !left.is_empty() {
                    if let Err(e) = inner.sub().unsubscribe(left).await {
                        tracing::debug!(error = %e, "cannot unsubscribe from wake-ups");
                    }
                }
            });
        }
    }
}

/// Routes each message to its channel's listeners until the hub is dropped;
/// on a cluster, moves to another primary when its own fails (`node`).
async fn run(
    inner: Arc<Inner>,
    mut messages: broadcast::Receiver<Message>,
    mut node: Option<nodes::subscriber::Subscriber>,
    mut stop: watch::Receiver<bool>,
) {
    let mut reconnects = inner.sub().reconnect_rx();
    // A loop that has ended no longer listens; the others still do.
    let wake_all = |probe: bool| {
        let (routes, now) = (inner.routes.lock().unwrap_or_else(|e| e.into_inner()), Instant::now());
        for (_, bell) in routes.values().flatten() {
            bell.ring(now, probe);
        }
    };
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = messages.recv() => match msg {
                Ok(msg) => {
                    if let Some(id) = msg.value.as_str().as_deref().and_then(aborts::signalled) {
                        aborts::fire(&msg.channel, id);
                        continue;
                    }
                    let routes = inner.routes.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(listeners) = routes.get(&*msg.channel) {
                        let at = Instant::now() + Duration::from_millis(msg.value.as_u64().unwrap_or(0));
                        for (_, bell) in listeners {
                            bell.ring(at, false);
                        }
                    }
                }
                // Missed some (wake-ups come faster than they are
                // routed): every loop promotes and claims now, and
                // probes within its fetch_interval.
                Err(RecvError::Lagged(_)) => wake_all(false),
                Err(RecvError::Closed) => break,
            },
            Ok(_) = reconnects.recv() => {
                let _changing = inner.changes.lock().await;
                let channels = inner.channels();
                let subscribed = channels.is_empty() || match in_time(inner.sub().subscribe(channels)).await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%error, "cannot resubscribe to wake-ups; the consumers poll every fetch_interval until the next reconnect");
                        false
                    }
                };
                // Wake-ups published while disconnected, or before the
                // subscription was back, are lost.
                inner.look_again(subscribed);
            }
            _ = moved_off(&mut node) => {
                let Some(next) = nodes::subscriber::subscriber(&inner.origin).await else {
                    // No other primary known: stay, and look again at the next news.
                    continue;
                };
                if let Some(moved) = subscribe_on(&inner, &next).await {
                    messages = moved;
                    reconnects = inner.sub().reconnect_rx();
                    node = Some(next);
                    inner.look_again(true);
                }
            }
        }
    }
    let _ = inner.sub().quit().await;
}

/// Subscribes `next` to every channel of the hub and makes it the hub's
/// connection (closing the old one); returns its messages. `None`, and
/// nothing changed, when it cannot.
async fn subscribe_on(inner: &Inner, next: &nodes::subscriber::Subscriber) -> Option<broadcast::Receiver<Message>> {
    let _changing = inner.changes.lock().await;
    let (sub, messages) = (next.client.clone(), next.client.message_rx());
    let subscribed = async {
        sub.init().await?;
        let channels = inner.channels();
        if !channels.is_empty() {
            sub.subscribe(channels).await?;
        }
        Ok::<_, fred::error::Error>(())
    };
    let failed = in_time(subscribed).await.err();
    let moved = failed.is_none();
    let old = match failed {
        None => std::mem::replace(&mut *inner.sub.lock().unwrap_or_else(|e| e.into_inner()), sub),
        Some(error) => {
            tracing::warn!(%error, "cannot move the wake-up subscriber to another primary");
            sub
        }
    };
    tokio::spawn(async move {
        let _ = old.quit().await;
    });
    moved.then_some(messages)
}

/// Resolves when the cluster primary the hub subscribes on fails; never
/// for a hub on another kind of server.
async fn moved_off(node: &mut Option<nodes::subscriber::Subscriber>) {
    match node {
        Some(node) => node.moved_off().await,
        None => std::future::pending().await,
    }
}
