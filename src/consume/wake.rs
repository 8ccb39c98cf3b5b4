//! Wake-ups: a dedicated subscriber connection that tells a sleeping
//! consumer when work becomes due sooner than it knows of.
//!
//! Scripts publish on the queue's wake-up channel when a message becomes
//! claimable (nack, timeout) or is due before every other pending message
//! (send, nack with a delay); the message is how many milliseconds from now.
//! A wake-up is only an optimisation: the consumer still sweeps every
//! `fetch_interval`, so a lost one (disconnect, no pub/sub permission)
//! costs at most one interval, never a stuck message.

use std::time::Duration;

use fred::prelude::{Client, ClientLike, EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Subscribes on a connection of its own (a subscribed connection serves
/// nothing else) to every channel of `channels` (one per shard), then
/// starts a task that sends the instant each wake-up asks for to that
/// channel's receiver; it ends when `stop` turns true. Returns once
/// subscribed, so every wake-up published after that arrives; when
/// subscribing fails the consumer just polls.
pub(crate) async fn spawn(
    client: &Client,
    channels: Vec<String>,
    stop: watch::Receiver<bool>,
) -> (Vec<mpsc::UnboundedReceiver<Instant>>, JoinHandle<()>) {
    let (txs, rxs) = channels.iter().map(|_| mpsc::unbounded_channel()).unzip();
    let sub = client.clone_new();
    let messages = sub.message_rx();
    let subscribed = async {
        sub.init().await?;
        sub.subscribe(channels.clone()).await
    };
    let task = match tokio::time::timeout(SUBSCRIBE_TIMEOUT, subscribed).await {
        Ok(Ok(())) => tokio::spawn(run(sub, messages, channels, txs, stop)),
        failed => {
            let error = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {SUBSCRIBE_TIMEOUT:?}"),
            };
            tracing::warn!(channel = %channels[0], %error, "cannot subscribe to wake-ups; the consumer polls every fetch_interval");
            tokio::spawn(async move {
                let _ = sub.quit().await;
            })
        }
    };
    (rxs, task)
}

/// How long start-up waits for the subscription.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

async fn run(
    sub: Client,
    mut messages: broadcast::Receiver<Message>,
    channels: Vec<String>,
    txs: Vec<mpsc::UnboundedSender<Instant>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut reconnects = sub.reconnect_rx();
    // A loop that has ended no longer listens; the others still do.
    let wake_all = |at: Instant| {
        for tx in &txs {
            let _ = tx.send(at);
        }
    };
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = messages.recv() => match msg {
                Ok(msg) => {
                    if let Some(tx) = channels.iter().position(|c| **c == *msg.channel).map(|i| &txs[i]) {
                        let ms = msg.value.as_u64().unwrap_or(0);
                        let _ = tx.send(Instant::now() + Duration::from_millis(ms));
                    }
                }
                // Missed some: wake now, the loops sort it out.
                Err(RecvError::Lagged(_)) => wake_all(Instant::now()),
                Err(RecvError::Closed) => break,
            },
            Ok(_) = reconnects.recv() => {
                // Wake-ups published while disconnected are lost: look now.
                wake_all(Instant::now());
                if let Err(e) = sub.subscribe(channels.clone()).await {
                    tracing::warn!(channel = %channels[0], error = %e, "cannot resubscribe to wake-ups");
                }
            }
        }
    }
    let _ = sub.quit().await;
}
