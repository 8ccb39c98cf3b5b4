//! Dispatching a send: the messages stored in chunks of one shard, one
//! `send` script call each, several in flight, and each message's result
//! judged from what its call did.

use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use super::builder::Sent;
use crate::error::connection_failed;
use crate::events::{self, Event};
use crate::queue::durability::{self, Reconnects};
use crate::store::ops::get::Get;
use crate::store::ops::send::{Outgoing, SendBatch, SendMode, SendOutcome};
use crate::store::stored::decode_stored;
use crate::store::{Keys, Op};
use crate::{Backoff, DelayQueue, Error, MessageId, MessageInfo};

/// Most bytes of payload in one script call; larger batches are split.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Script calls of one batch in flight at once.
const CHUNKS_IN_FLIGHT: usize = 8;

/// What a dispatch did: each message's result, in the caller's order, and
/// what confirming them needs ([`Dispatched::confirm`]).
pub(crate) struct Dispatched {
    pub results: Vec<Result<Sent, Error>>,
    /// The shards written to.
    pub(super) written: Vec<usize>,
    /// Reconnects since the dispatch began.
    pub(super) reconnects: Reconnects,
    /// The client reconnected during the dispatch.
    pub(super) reconnected: bool,
    /// Whether a flow's parent was refused as sent before its children set
    /// was filled ([`SendOutcome::Unfilled`]).
    pub unfilled: bool,
    /// Whether a flow's parent was stored after a child linked to it
    /// finished ([`SendOutcome::Overtaken`]).
    pub overtaken: bool,
}

/// Stores `msgs` in chunks of at most `batch_size` messages (and
/// [`CHUNK_BYTES`] of values) of one shard, one `send` script call each,
/// [`CHUNKS_IN_FLIGHT`] at once, and judges what each call did with each
/// message.
pub(crate) async fn dispatch(queue: &DelayQueue, msgs: Vec<Outgoing>) -> Result<Dispatched, Error> {
    let inner = &queue.inner;
    let (client, name, config) = (&inner.client, &inner.name, &inner.config);
    // Boxed: its probe of the server is a client future of kilobytes.
    Box::pin(durability::check_waitaof(
        client,
        name,
        &config.durability,
        &inner.shards,
        &inner.waitaof_checked,
    ))
    .await?;
    if queue.shards() > 1 {
        queue.claim_shard_count().await?;
    }
    let (chunks, written) = chunked(queue, msgs);
    let started = Instant::now();
    // A reconnect during the call means fred may have re-sent a script
    // whose first run stored its messages, and that a WAIT on the new
    // connection counts none of them.
    let mut reconnects = durability::reconnects(client);
    // Every chunk to its end, failed or not: what is in flight runs anyway.
    let stored: Vec<(Chunk, ChunkReply)> = futures::stream::iter(chunks)
        .map(|chunk| store_chunk(queue, chunk))
        .buffered(CHUNKS_IN_FLIGHT)
        .collect()
        .await;
    let reconnected = durability::reconnected(&mut reconnects);
    let done = all_stored(queue, stored)?;
    let (mut results, mut unfilled, mut overtaken) = (Vec::new(), false, false);
    for (chunk, outcomes) in done {
        let k = &inner.shards[chunk.shard];
        for ((m, place), (outcome, until)) in chunk.msgs.into_iter().zip(chunk.places).zip(outcomes) {
            unfilled |= outcome == SendOutcome::Unfilled;
            overtaken |= outcome == SendOutcome::Overtaken;
            results.push((place, judge(queue, k, m, outcome, until, reconnected, started).await));
        }
    }
    Ok(Dispatched {
        results: in_order(results),
        written,
        reconnects,
        reconnected,
        unfilled,
        overtaken,
    })
}

/// Messages of one shard that one script call stores.
struct Chunk {
    shard: usize,
    msgs: Vec<Outgoing>,
    /// Where each message was in the caller's batch.
    places: Vec<usize>,
    bytes: usize,
}

/// What one chunk's script call answered.
type ChunkReply = Result<<SendBatch as Op>::Reply, Error>;

/// `msgs` in chunks per shard, each message keeping its place in the
/// results; and the shards written to.
fn chunked(queue: &DelayQueue, msgs: Vec<Outgoing>) -> (Vec<Chunk>, Vec<usize>) {
    let batch_size = queue.inner.config.consume.batch_size;
    let mut open: Vec<Option<usize>> = vec![None; queue.shards()];
    let mut chunks: Vec<Chunk> = Vec::new();
    for (place, msg) in msgs.into_iter().enumerate() {
        let shard = queue.shard_index(msg.id.as_str());
        let chunk = match open[shard] {
            Some(c) if chunks[c].msgs.len() < batch_size && chunks[c].bytes + msg.value.len() <= CHUNK_BYTES => c,
            _ => {
                chunks.push(Chunk {
                    shard,
                    msgs: Vec::new(),
                    places: Vec::new(),
                    bytes: 0,
                });
                open[shard] = Some(chunks.len() - 1);
                chunks.len() - 1
            }
        };
        let chunk = &mut chunks[chunk];
        chunk.bytes += msg.value.len();
        chunk.places.push(place);
        chunk.msgs.push(msg);
    }
    let written = open
        .iter()
        .enumerate()
        .filter_map(|(shard, c)| c.map(|_| shard))
        .collect();
    (chunks, written)
}

/// Each chunk with what its call did, or the error to report when a
/// chunk failed: a lost connection first, since it leaves messages of the
/// call maybe stored ([`Error::Unconfirmed`], naming every message of the
/// call).
fn all_stored(
    queue: &DelayQueue,
    stored: Vec<(Chunk, ChunkReply)>,
) -> Result<Vec<(Chunk, <SendBatch as Op>::Reply)>, Error> {
    let mut failure: Option<Error> = None;
    let mut done = Vec::with_capacity(stored.len());
    for (chunk, outcomes) in stored {
        match outcomes {
            Ok(outcomes) => done.push((chunk, outcomes)),
            Err(e) => {
                if failure.as_ref().is_none_or(|f| !lost(f) && lost(&e)) {
                    failure = Some(e);
                }
                done.push((chunk, Vec::new()));
            }
        }
    }
    match failure {
        Some(Error::Redis(source)) if connection_failed(&source) => {
            let ids = done
                .into_iter()
                .flat_map(|(chunk, _)| chunk.places.into_iter().zip(chunk.msgs.into_iter().map(|m| m.id)))
                .collect();
            Err(Error::Unconfirmed {
                queue: queue.inner.name.clone(),
                ids: in_order(ids),
                source,
            })
        }
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// Stores one chunk with one `send` script call; returns the chunk with
/// what the script did with each message.
async fn store_chunk(queue: &DelayQueue, chunk: Chunk) -> (Chunk, Result<<SendBatch as Op>::Reply, Error>) {
    let op = SendBatch { msgs: chunk.msgs };
    let outcomes = queue.store(&queue.inner.shards[chunk.shard]).run(&op).await;
    let chunk = Chunk { msgs: op.msgs, ..chunk };
    (chunk, outcomes)
}

/// Whether `e` says the connection failed, so the call's messages may be
/// stored or not.
fn lost(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if connection_failed(e))
}

/// The values of `placed` sorted by their place in the caller's batch.
fn in_order<T>(mut placed: Vec<(usize, T)>) -> Vec<T> {
    placed.sort_unstable_by_key(|(place, _)| *place);
    placed.into_iter().map(|(_, v)| v).collect()
}

/// The result of message `m` from what the script did with it. A live id
/// is this call's own message, stored by a first run whose reply was lost
/// (fred re-sent the script on a new connection), when the id was
/// generated, or when the client `reconnected` during the call (which
/// began `started`) and Redis holds the same message, stored since then;
/// otherwise it is a duplicate, or for a replace, not pending. A marker
/// that refused it (`until`: when it expires) may be this call's own
/// message's too, when the client reconnected.
async fn judge(
    queue: &DelayQueue,
    k: &Keys,
    m: Outgoing,
    outcome: SendOutcome,
    until: Option<SystemTime>,
    reconnected: bool,
    started: Instant,
) -> Result<Sent, Error> {
    let q = &queue.inner;
    let replace = matches!(m.mode, Some(SendMode::Replace { .. }));
    let own = match outcome {
        SendOutcome::Stored | SendOutcome::Overtaken => true,
        SendOutcome::Replaced => {
            tracing::debug!(queue = %q.name, id = %m.id, delay_ms = m.delay.as_millis() as u64, "replaced");
            return Ok(Sent::Replaced(m.id));
        }
        SendOutcome::Missing => return Err(not_pending(&q.name, m.id, false)),
        SendOutcome::Live if replace => return Err(not_pending(&q.name, m.id, true)),
        SendOutcome::Live if !m.own_id => true,
        SendOutcome::Live | SendOutcome::Held if reconnected => match queue.store(k).run(&Get { id: m.id.as_str() }).await {
            Ok(Some((found, now))) => stored_by_this_call(&found, now, &m, started.elapsed()),
            // Delivered and acked since: it cannot be told.
            Ok(None) => return Err(unconfirmed(&q.name, m.id, reconnect_error())),
            Err(Error::Redis(e)) if connection_failed(&e) => return Err(unconfirmed(&q.name, m.id, e)),
            Err(e) => return Err(e),
        },
        SendOutcome::Held => return Ok(Sent::Dropped { id: m.id, until }),
        SendOutcome::Live => false,
        SendOutcome::WrongType => {
            return Err(Error::WrongType {
                queue: q.name.clone(),
                detail: format!("the payload key of message {} holds another type", m.id),
            })
        }
        SendOutcome::Unfilled => {
            return Err(Error::Internal(format!(
                "flow parent {} was sent before its children set was filled; nothing was stored, send it again",
                m.id
            )))
        }
        SendOutcome::StagedGone => {
            return Err(Error::Internal(format!(
                "the staged value of message {} was gone (evicted?) when the send script ran; nothing was stored, send it again",
                m.id
            )))
        }
    };
    if !own {
        return Ok(Sent::Dropped { id: m.id, until: None });
    }
    tracing::debug!(queue = %q.name, id = %m.id, delay_ms = m.delay.as_millis() as u64, "sent");
    q.meters.sent.increment(1);
    events::emit(&q.events, || Event::Sent { id: m.id.clone() });
    Ok(Sent::Stored(m.id))
}

/// [`Error::NotPending`] for a replace of message `id`.
fn not_pending(queue: &str, id: MessageId, live: bool) -> Error {
    Error::NotPending {
        queue: queue.to_string(),
        id,
        live,
    }
}

/// Whether `found`, read at `now` by Redis's clock, is message `m` as a
/// call that began `elapsed` ago stored it: the same payload, headers,
/// retry count, backoff, priority, delay and expiry, stored since the call
/// began. (Its times come from the primary that stored it: after a
/// failover, a clock skew between the two primaries shifts that bound.)
fn stored_by_this_call(found: &MessageInfo, now: SystemTime, m: &Outgoing, elapsed: Duration) -> bool {
    let (Some(sent), Some(sent_at)) = (decode_stored(&m.value), found.sent_at) else {
        return false;
    };
    // Redis's times are whole milliseconds.
    let began = now.checked_sub(elapsed + Duration::from_millis(1));
    let delay = found.first_due.and_then(|due| due.duration_since(sent_at).ok());
    let backoff = |b: Option<&Backoff>| b.map(|b| b.encode().ok());
    began.is_none_or(|began| sent_at >= began)
        && found.payload == sent.payload
        && found.headers == sent.headers
        && found.retry_count == Some(sent.retry_count)
        && found.priority == sent.priority
        && found.group == sent.group
        && backoff(found.backoff.as_ref()) == backoff(sent.backoff.as_ref())
        && delay == Some(Duration::from_millis(m.delay.as_millis() as u64))
        && found.expires_at.is_some() == m.expire_after.is_some()
}

/// [`Error::Unconfirmed`] for message `id` alone.
fn unconfirmed(queue: &str, id: MessageId, source: fred::error::Error) -> Error {
    Error::Unconfirmed {
        queue: queue.to_string(),
        ids: vec![id],
        source,
    }
}

/// The source of an [`Error::Unconfirmed`] that no command failed with:
/// the client reconnected during the send.
pub(super) fn reconnect_error() -> fred::error::Error {
    fred::error::Error::new(
        fred::error::ErrorKind::IO,
        "the connection to Redis was re-established during the send",
    )
}
