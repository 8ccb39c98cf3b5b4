//! A loopback TCP proxy between clients and a Redis port, for network fault tests.
//!
//! Killing Redis tests restarts, but not the faults a live server sees on a
//! flaky network: a connection that drops while Redis is fine, and above all
//! a request that *reached* Redis and ran while its reply never came back.
//! fred answers the latter by reconnecting and re-sending the command, so
//! every script runs twice; only a proxy can produce that on demand.
//!
//! - [`Proxy::cut_all`] drops every open connection now (requests in flight
//!   may or may not have reached Redis).
//! - [`Proxy::cut_replies_once`] arms every open connection: the next reply
//!   bytes Redis sends on it are swallowed and the connection is closed, so
//!   the request they answer has run but its caller never learns the result.
//! - [`Proxy::delay_replies`] holds every reply chunk back for a while: a
//!   slow link, or a Redis slower than the client, as the client sees it.
//! - [`Proxy::hold_requests`] holds back the request chunks that carry a
//!   given command: a command the client has written that Redis has not
//!   run yet, while the client's other connections go on.
//!
//! Connections opened after an arm are not armed (a reconnect is not cut at
//! once); an armed connection stays armed until its next reply, however
//! late (an idle pub/sub connection is cut at its next message). Dropping
//! the proxy stops it and closes every connection.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// State shared by the proxy handle and its connection tasks.
#[derive(Default)]
struct Shared {
    /// Bumped by `cut_replies_once`; a connection opened at an older value is armed.
    swallow_epoch: AtomicU64,
    /// Connections closed by a fault (either kind).
    cuts: AtomicU64,
    /// Of those, connections closed after swallowing a reply.
    swallowed: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Set by `delay_replies`: µs each reply chunk is held back.
    reply_delay_us: AtomicU64,
    /// Set by `hold_requests`: request chunks with these bytes wait this long.
    held: Mutex<Option<(Vec<u8>, Duration)>>,
}

/// A running proxy; see the module docs.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    /// Bumped by `cut_all`; every connection task watches it.
    cut_all: watch::Sender<u64>,
    /// The accept loop; it owns the connection tasks, so aborting it ends them all.
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `127.0.0.1:upstream_port`.
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("proxy: cannot bind 127.0.0.1:0");
        let port = listener.local_addr().expect("proxy: local_addr").port();
        let shared = Arc::new(Shared::default());
        let (cut_all, cut_rx) = watch::channel(0);
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let task = tokio::spawn(accept_loop(listener, upstream, shared.clone(), cut_rx));
        Proxy {
            port,
            shared,
            cut_all,
            task,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Drops every open connection now.
    pub fn cut_all(&self) {
        self.cut_all.send_modify(|n| *n += 1);
    }

    /// Arms every open connection: its next reply chunk from Redis is
    /// swallowed and the connection closed.
    pub fn cut_replies_once(&self) {
        self.shared.swallow_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Holds each reply chunk back for `delay` before passing it on (zero:
    /// no delay). Replies stay in order, so a connection answers at most one
    /// chunk per `delay`, however many requests it carries.
    pub fn delay_replies(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.reply_delay_us.store(us, Ordering::SeqCst);
    }

    /// Holds each request chunk that contains `command` (as the client
    /// writes it, e.g. `"SUBSCRIBE"`) back for `delay` before passing it
    /// on; the connection's later requests wait behind it, other
    /// connections do not.
    pub fn hold_requests(&self, command: &str, delay: Duration) {
        *self.shared.held.lock().unwrap() = Some((command.as_bytes().to_vec(), delay));
    }

    /// Connections closed by a fault so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Connections closed after swallowing a reply (so a request ran unanswered).
    pub fn swallowed(&self) -> u64 {
        self.shared.swallowed.load(Ordering::SeqCst)
    }

    /// Connections accepted so far (reconnects included).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// A connected fred client through the proxy, set up like
    /// `RedisServer::client()`.
    pub async fn client(&self) -> Client {
        super::client_for(&self.url()).await
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>, cut: watch::Receiver<u64>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                conns.spawn(serve(client, upstream, shared.clone(), cut.clone()));
            }
            // Reap finished connections so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Pumps one connection both ways until either side closes or a fault cuts it.
/// Returning drops both sockets, which closes them.
async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>, mut cut: watch::Receiver<u64>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    cut.mark_unchanged();
    let armed_from = shared.swallow_epoch.load(Ordering::SeqCst);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let requests = forward(&mut client_rx, &mut server_tx, |chunk| {
        let held = shared.held.lock().unwrap();
        let hold = held
            .as_ref()
            .filter(|(command, _)| chunk.windows(command.len()).any(|w| w == &command[..]));
        Some(hold.map_or(Duration::ZERO, |(_, delay)| *delay))
    });
    let replies = forward(&mut server_rx, &mut client_tx, |_| {
        if shared.swallow_epoch.load(Ordering::SeqCst) != armed_from {
            // The request these bytes answer has run; its caller never hears.
            shared.swallowed.fetch_add(1, Ordering::SeqCst);
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        Some(Duration::from_micros(shared.reply_delay_us.load(Ordering::SeqCst)))
    });
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
        _ = cut.changed() => {
            shared.cuts.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Passes the chunks read on `from` to `to` until either side closes;
/// `before` sees each chunk first and says how long to hold it back, or
/// `None` to close the connection instead.
async fn forward(from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf, mut before: impl FnMut(&[u8]) -> Option<Duration>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let Some(hold) = before(&buf[..n]) else { return };
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
