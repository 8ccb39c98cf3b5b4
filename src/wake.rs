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
/// nothing else), then starts a task that sends the instant each wake-up
/// asks for; it ends when `stop` turns true. Returns once subscribed, so
/// every wake-up published after that arrives; when subscribing fails the
/// consumer just polls.
pub(crate) async fn spawn(
    client: &Client,
    channel: String,
    stop: watch::Receiver<bool>,
) -> (mpsc::UnboundedReceiver<Instant>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = client.clone_new();
    let messages = sub.message_rx();
    let subscribed = async {
        sub.init().await?;
        sub.subscribe(channel.as_str()).await
    };
    let task = match tokio::time::timeout(SUBSCRIBE_TIMEOUT, subscribed).await {
        Ok(Ok(())) => tokio::spawn(run(sub, messages, channel, tx, stop)),
        failed => {
            let error = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {SUBSCRIBE_TIMEOUT:?}"),
            };
            tracing::warn!(%channel, %error, "cannot subscribe to wake-ups; the consumer polls every fetch_interval");
            tokio::spawn(async move {
                let _ = sub.quit().await;
            })
        }
    };
    (rx, task)
}

/// How long start-up waits for the subscription.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

async fn run(
    sub: Client,
    mut messages: broadcast::Receiver<Message>,
    channel: String,
    tx: mpsc::UnboundedSender<Instant>,
    mut stop: watch::Receiver<bool>,
) {
    let mut reconnects = sub.reconnect_rx();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = messages.recv() => match msg {
                Ok(msg) if *msg.channel == *channel => {
                    let ms = msg.value.as_u64().unwrap_or(0);
                    if tx.send(Instant::now() + Duration::from_millis(ms)).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                // Missed some: wake now, the loop sorts it out.
                Err(RecvError::Lagged(_)) => {
                    if tx.send(Instant::now()).is_err() {
                        break;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            Ok(_) = reconnects.recv() => {
                // Wake-ups published while disconnected are lost: look now.
                let _ = tx.send(Instant::now());
                if let Err(e) = sub.subscribe(channel.as_str()).await {
                    tracing::warn!(%channel, error = %e, "cannot resubscribe to wake-ups");
                }
            }
        }
    }
    let _ = sub.quit().await;
}
